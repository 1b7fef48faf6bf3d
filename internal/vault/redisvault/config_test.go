//go:build unix

package redisvault

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Bad configuration is refused and the error names the value; a password in
// the URL never appears in an error.
func TestOpenRefusesBadConfig(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no url", Config{}, "url is required"},
		{"bad url", Config{URL: "http://user:hunter2@host:6379"}, "not a valid redis://"},
		{"braces in prefix", Config{URL: "redis://127.0.0.1:1", KeyPrefix: "tt:{x}:"}, `key_prefix "tt:{x}:"`},
		{"negative max_bytes", Config{URL: "redis://127.0.0.1:1", MaxBytes: -1}, "max_bytes -1"},
		{"negative min_replicas", Config{URL: "redis://127.0.0.1:1", MinReplicas: -2}, "min_replicas -2"},
		{"tenant over max", Config{URL: "redis://127.0.0.1:1", MaxBytes: 100, TenantMaxBytes: 200}, "tenant_max_bytes 200 exceeds max_bytes 100"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Open(context.Background(), c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error leaks the password: %v", err)
			}
		})
	}
}

// A server that may evict keys is refused at open, naming its policy; a
// noeviction server is accepted.
func TestOpenRefusesEvictingPolicy(t *testing.T) {
	srv := startServer(t)
	admin := srv.Client()
	ctx := context.Background()
	for _, policy := range []string{"allkeys-lru", "volatile-ttl", "allkeys-random", "noeviction"} {
		t.Run(policy, func(t *testing.T) {
			if err := admin.ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
				t.Fatal(err)
			}
			st, err := Open(ctx, Config{URL: srv.URL()})
			if policy == "noeviction" {
				if err != nil {
					t.Fatalf("noeviction refused: %v", err)
				}
				st.Close()
				return
			}
			if !errors.Is(err, ErrEvictingPolicy) || !strings.Contains(err.Error(), policy) {
				t.Fatalf("open on %s: %v, want ErrEvictingPolicy naming it", policy, err)
			}
		})
	}
}

// A server that refuses the URL's credentials is refused at open (it
// answered: this is configuration, not an outage); the right ones work.
func TestOpenRefusesWrongPassword(t *testing.T) {
	srv := startServer(t)
	if err := srv.Client().ConfigSet(context.Background(), "requirepass", "right-one").Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		url string
		ok  bool
	}{
		{fmt.Sprintf("redis://:wrong-one@127.0.0.1:%d/0", srv.Port), false},
		{fmt.Sprintf("redis://127.0.0.1:%d/0", srv.Port), false},
		{fmt.Sprintf("redis://:right-one@127.0.0.1:%d/0", srv.Port), true},
	} {
		st, err := Open(context.Background(), Config{URL: c.url})
		if c.ok != (err == nil) {
			t.Fatalf("open with %s: %v", strings.Split(c.url, "@")[0], err)
		}
		if err != nil && (strings.Contains(err.Error(), "wrong-one") || strings.Contains(err.Error(), "right-one")) {
			t.Fatalf("error leaks the password: %v", err)
		}
		if st != nil {
			st.Close()
		}
	}
}
