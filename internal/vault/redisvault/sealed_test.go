//go:build unix

package redisvault

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/seal"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/storetest"
)

// Redis with encryption at rest on passes the conformance suite.
func TestConformanceSealed(t *testing.T) {
	srv := startServer(t)
	storetest.Run(t, storetest.Sealed(func(t *testing.T, cfg storetest.Config) vault.Backend {
		return srv.open(t, Config{
			KeyPrefix:      strings.ReplaceAll(t.Name(), "/", ":") + ":",
			MaxBytes:       cfg.MaxBytes,
			TenantMaxBytes: cfg.TenantMaxBytes,
			Retention:      cfg.Retention,
			Now:            cfg.Now,
			OpTimeout:      suiteTimeout,
		})
	}), storetest.Capacity, storetest.TenantQuota, storetest.LineageTTL, storetest.Persistent, storetest.Recovery, storetest.TenantRate)
}

const redisMarker = "PLANTED-MARKER-7f3a9c-PROD_DB_PASSWORD"

// No Redis key or value holds a sealed artifact's text; the right keys
// read it exactly, other keys or none read nothing; one flipped byte is an
// error, never other content. Without keys the marker is found (the check
// can see it).
func TestSealedAtRestRedis(t *testing.T) {
	for _, sealed := range []bool{false, true} {
		srv := startServer(t)
		st := srv.open(t, Config{OpTimeout: suiteTimeout})
		ctx := context.Background()
		alice, err := seal.Derive([]byte("gateway tenant key for the tests"), "sk-alice")
		if err != nil {
			t.Fatal(err)
		}
		if sealed {
			ctx = seal.NewContext(ctx, alice)
		}
		a := testArt(1, 9000)
		a.Text = a.Text[:4000] + redisMarker + a.Text[4000:]
		a.Raw = []byte(fmt.Sprintf("%q", a.Text))
		a.Digest = artifact.DigestOf(a.Text, a.Raw)
		a.Chars = len([]rune(a.Text))
		if sealed {
			a.Digest = alice.ID(a.Digest)
		}
		if err := st.Persist(ctx, artifact.Scope{Tenant: "t"}, []artifact.Artifact{a}); err != nil {
			t.Fatal(err)
		}
		if got := len(srv.KeysHolding(t, redisMarker)) > 0; got == sealed {
			t.Fatalf("sealed=%v: marker in Redis = %v", sealed, got)
		}
		if !sealed {
			continue
		}
		if got, ok, err := st.Get(ctx, "t", a.Digest); err != nil || !ok || got.Text != a.Text || string(got.Raw) != string(a.Raw) {
			t.Fatalf("Get with the right keys = %v, %v", ok, err)
		}
		if hits, err := st.Search(ctx, "t", redisMarker, 5); err != nil || len(hits) != 1 {
			t.Fatalf("Search with the right keys = %d, %v", len(hits), err)
		}
		mallory, _ := seal.Derive([]byte("gateway tenant key for the tests"), "sk-mallory")
		for name, c := range map[string]context.Context{"other keys": seal.NewContext(context.Background(), mallory), "no keys": context.Background()} {
			if got, _, err := st.Get(c, "t", a.Digest); err == nil || got.Text != "" {
				t.Fatalf("Get with %s = %q, %v", name, got.Text, err)
			}
			if hits, err := st.Search(c, "t", redisMarker, 5); err != nil || len(hits) != 0 {
				t.Fatalf("Search with %s = %d, %v", name, len(hits), err)
			}
		}
		key := st.k.tenant("t").artifact(hexOf(a.Digest))
		v, err := srv.Client().Get(context.Background(), key).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range []int{1, len(v) / 2, len(v) - 1} {
			w := []byte(string(v))
			w[i] ^= 0x01
			if err := srv.Client().Set(context.Background(), key, w, 0).Err(); err != nil {
				t.Fatal(err)
			}
			if got, ok, err := st.Get(ctx, "t", a.Digest); err == nil || ok || got.Text != "" {
				t.Fatalf("byte %d flipped: Get = %v, %v", i, ok, err)
			}
		}
	}
}
