package redisvault

import (
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/vault"
	"github.com/tokenterminator/caddy-token-terminator/vault/storetest"
)

// Redis passes the conformance suite Badger passes, and the per-tenant quota
// cases. Each case gets its own key prefix on one server; opening again
// within a case reaches the same keys (Persistent).
func TestConformance(t *testing.T) {
	srv := startServer(t)
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) vault.Backend {
		return srv.open(t, Config{
			KeyPrefix:      strings.ReplaceAll(t.Name(), "/", ":") + ":",
			MaxBytes:       cfg.MaxBytes,
			TenantMaxBytes: cfg.TenantMaxBytes,
			Retention:      cfg.Retention,
			Now:            cfg.Now,
		})
	}, storetest.Capacity, storetest.TenantQuota, storetest.LineageTTL, storetest.Persistent)
}
