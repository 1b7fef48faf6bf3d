package badgervault_test

import (
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/badgervault"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/storetest"
)

// Badger passes the backend conformance suite. Opening again within one test
// reopens the same directory (Persistent).
func TestBadgerConformance(t *testing.T) {
	dirs := map[*testing.T]string{}
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) vault.Backend {
		dir, ok := dirs[t]
		if !ok {
			dir = t.TempDir()
			dirs[t] = dir
		}
		vc := badgervault.Config{Dir: dir, MaxBytes: cfg.MaxBytes, TenantMaxBytes: cfg.TenantMaxBytes, Retention: cfg.Retention}
		if cfg.Now != nil {
			badgervault.SetClock(&vc, cfg.Now)
		}
		s, err := badgervault.Open(vc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}, storetest.Capacity, storetest.TenantQuota, storetest.LineageTTL, storetest.Persistent, storetest.Recovery, storetest.TenantRate)
}

// Badger with encryption at rest on passes the same suite.
func TestBadgerConformanceSealed(t *testing.T) {
	dirs := map[*testing.T]string{}
	storetest.Run(t, storetest.Sealed(func(t *testing.T, cfg storetest.Config) vault.Backend {
		dir, ok := dirs[t]
		if !ok {
			dir = t.TempDir()
			dirs[t] = dir
		}
		vc := badgervault.Config{Dir: dir, MaxBytes: cfg.MaxBytes, TenantMaxBytes: cfg.TenantMaxBytes, Retention: cfg.Retention}
		if cfg.Now != nil {
			badgervault.SetClock(&vc, cfg.Now)
		}
		s, err := badgervault.Open(vc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}), storetest.Capacity, storetest.TenantQuota, storetest.LineageTTL, storetest.Persistent, storetest.Recovery, storetest.TenantRate)
}
