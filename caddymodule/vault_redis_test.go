//go:build unix

package caddymodule

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault/redisvault/redistest"
)

// What the operator can fix in the config is refused when it loads, the
// value named; a password is never part of an error or the vault key.
func TestRedisVaultProvision(t *testing.T) {
	t.Setenv("TT_TEST_REDIS_URL", "redis://fleet:s3cret-pw@127.0.0.1:6390/2")
	t.Setenv("TT_TEST_BAD_URL", "http://fleet:s3cret-pw@127.0.0.1:6390")
	tests := []struct {
		name string
		json string
		err  string
		key  string // VaultKey when provisioned
	}{
		{name: "placeholder", json: `{"url":"{env.TT_TEST_REDIS_URL}"}`, key: "redis:redis://fleet@127.0.0.1:6390/2|tt:"},
		{name: "prefix", json: `{"url":"redis://127.0.0.1:6390/0","key_prefix":"fleet-a:"}`, key: "redis:redis://127.0.0.1:6390/0|fleet-a:"},
		{name: "no url", json: `{}`, err: "url is required"},
		{name: "unknown placeholder", json: `{"url":"{env.TT_TEST_NOT_SET}"}`, err: "vault redis url '{env.TT_TEST_NOT_SET}'"},
		{name: "bad scheme behind a placeholder", json: `{"url":"{env.TT_TEST_BAD_URL}"}`, err: "vault redis url '{env.TT_TEST_BAD_URL}': redisvault: url is not a valid"},
		{name: "bad scheme literal", json: `{"url":"http://fleet:s3cret-pw@127.0.0.1:6390"}`, err: "vault redis url 'http://fleet@127.0.0.1:6390': redisvault: url is not a valid"},
		{name: "braces in prefix", json: `{"url":"redis://127.0.0.1:1/0","key_prefix":"a{b}"}`, err: "key_prefix 'a{b}' may not contain"},
		{name: "quota above capacity", json: `{"url":"redis://127.0.0.1:1/0","max_bytes":100,"tenant_max_bytes":200}`, err: "tenant_max_bytes (200) must not exceed max_bytes (100)"},
		{name: "negative replicas", json: `{"url":"redis://127.0.0.1:1/0","min_replicas":-1}`, err: "min_replicas must be 0 or more, got -1"},
		{name: "zero capacity", json: `{"url":"redis://127.0.0.1:1/0","max_bytes":0}`, err: "max_bytes must be positive, got 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r RedisVault
			if err := json.Unmarshal([]byte(tt.json), &r); err != nil {
				t.Fatal(err)
			}
			err := r.Provision(newCtx(t))
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("error shows the password: %v", err)
			}
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Provision() = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := r.VaultKey(); got != tt.key || strings.Contains(got+r.VaultConfig(), "s3cret") {
				t.Fatalf("VaultKey() = %q, want %q", got, tt.key)
			}
		})
	}
}

func newCtx(t *testing.T) caddy.Context {
	_, c := newApp(t)
	return c
}

// The Caddyfile block maps onto the JSON fields; bad values are named.
func TestRedisVaultCaddyfile(t *testing.T) {
	var r RedisVault
	in := "redis {\nurl {env.TT_REDIS_URL}\ncluster on\nkey_prefix fleet:\nmax_bytes 8GiB\ntenant_max_bytes 2GiB\nmin_replicas 1\nop_timeout 500ms\n}"
	if err := r.UnmarshalCaddyfile(caddyfile.NewTestDispenser(in)); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(&r)
	want := `{"url":"{env.TT_REDIS_URL}","cluster":true,"key_prefix":"fleet:","max_bytes":8589934592,"tenant_max_bytes":2147483648,"min_replicas":1,"op_timeout":500000000}`
	if string(got) != want {
		t.Fatalf("JSON\n got %s\nwant %s", got, want)
	}
	for in, err := range map[string]string{
		"redis {\ncluster yes\n}":        "cluster: want on or off, got 'yes'",
		"redis {\nmin_replicas -2\n}":    "min_replicas: must be at least 0, got -2",
		"redis {\nop_timeout never\n}":   "op_timeout: bad duration 'never'",
		"redis {\nmax_bytes lots\n}":     "max_bytes: bad size 'lots'",
		"redis {\npassword hunter2\n}":   "unrecognized vault redis subdirective 'password'",
		"redis {\nurl a\nurl b\n}":       "duplicate subdirective 'url'",
		"redis {\nkey_prefix a b\n}":     "key_prefix takes exactly one argument, got extra 'b'",
		"redis redis://127.0.0.1:6379/0": "vault redis takes no inline arguments",
	} {
		var r RedisVault
		if e := r.UnmarshalCaddyfile(caddyfile.NewTestDispenser(in)); e == nil || !strings.Contains(e.Error(), err) {
			t.Errorf("%q: error %v, want %q", in, e, err)
		}
	}
}

// A server whose eviction policy could drop artifacts is refused when the
// config loads, the policy named; a server that is down is not: the
// handler provisions, passes candidates through while the tenant key is
// unreadable, and reads it once the server answers, without a reload.
func TestRedisVaultOpen(t *testing.T) {
	t.Run("evicting policy refused", func(t *testing.T) {
		srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
		app, ctx := newApp(t)
		h := &Handler{VaultRaw: json.RawMessage(`{"backend":"redis","url":"` + srv.URL() + `"}`)}
		err := provisionHandler(t, app, ctx, h)
		if err == nil || !strings.Contains(err.Error(), `"allkeys-lru"`) {
			t.Fatalf("provision on an evicting server: %v", err)
		}
	})
	t.Run("down at start", func(t *testing.T) {
		srv := redistest.Start(t)
		srv.Kill()
		app, ctx := newApp(t)
		h := &Handler{VaultRaw: json.RawMessage(`{"backend":"redis","url":"` + srv.URL() + `","op_timeout":"200ms"}`)}
		if err := provisionHandler(t, app, ctx, h); err != nil {
			t.Fatalf("a server that is down stopped the config: %v", err)
		}
		if h.gw.Compile == nil || h.gw.TenantKeyPending == nil || !h.gw.TenantKeyPending() {
			t.Fatal("handler not waiting for the tenant key")
		}
		if got := h.gw.Tenants("sk-test"); got != "" {
			t.Fatalf("tenant %q computed without the vault's key", got)
		}
		// A candidate meanwhile passes through untouched, with the reason.
		body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`
		w, seen := serve(t, h, newRequest(http.MethodPost, chatPath, strings.NewReader(body)))
		if tt := w.Header().Get(HeaderName); !strings.HasPrefix(tt, "passthrough=vault_error") || string(seen.body) != body {
			t.Fatalf("candidate while the tenant key is unreadable: header %q, forwarded %q", tt, seen.body)
		}
		srv.Restart()
		deadline := time.Now().Add(5 * time.Second)
		for h.gw.Tenants("sk-test") == "" {
			if time.Now().After(deadline) {
				t.Fatal("tenant key not read after the server came back")
			}
			time.Sleep(100 * time.Millisecond)
		}
		if h.gw.TenantKeyPending() {
			t.Fatal("tenant key still pending after it was read")
		}
		// Every replica computes the same tenants: the key is the one in Redis.
		h2 := &Handler{VaultRaw: json.RawMessage(`{"backend":"redis","url":"redis://localhost:` + fmt.Sprint(srv.Port) + `/0","op_timeout":"200ms"}`)}
		app2, ctx2 := newApp(t)
		if err := provisionHandler(t, app2, ctx2, h2); err != nil {
			t.Fatal(err)
		}
		if a, b := h.gw.Tenants("sk-test"), h2.gw.Tenants("sk-test"); a != b || h2.gw.TenantKeyPending != nil {
			t.Fatalf("replicas disagree on the tenant: %q and %q", a, b)
		}
	})
}

// go-redis's own lines (here: the refused dials of a server that is down)
// go to Caddy's logger, not as plain text to stderr.
func TestRedisLogsThroughCaddy(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	f := func() *zap.Logger { return zap.New(core) }
	old := redisLogger.Swap(&f)
	t.Cleanup(func() { redisLogger.Store(old) })
	srv := redistest.Start(t)
	srv.Kill()
	app, ctx := newApp(t)
	h := &Handler{VaultRaw: json.RawMessage(`{"backend":"redis","url":"` + srv.URL() + `","op_timeout":"200ms"}`)}
	if err := provisionHandler(t, app, ctx, h); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for logs.Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("go-redis wrote nothing to Caddy's logger")
		}
		h.gw.Tenants("sk-test") // a call that dials
		time.Sleep(50 * time.Millisecond)
	}
	e := logs.All()[0]
	if e.Level != zapcore.WarnLevel || e.Message == "" {
		t.Fatalf("go-redis line: %+v", e)
	}
}
