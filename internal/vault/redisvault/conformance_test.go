//go:build unix

package redisvault

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/storetest"
)

// suiteTimeout is the op timeout of the suite's stores: the suite checks
// semantics, and a call timed out on a loaded machine (-race) is not one.
const suiteTimeout = 10 * time.Second

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
			OpTimeout:      suiteTimeout,
		})
	}, storetest.Capacity, storetest.TenantQuota, storetest.LineageTTL, storetest.Persistent, storetest.Recovery, storetest.TenantRate)
}

// On a one-node Redis Cluster, which refuses any command or script whose
// keys span slots (CROSSSLOT), the suite passes too: every multi-key call
// stays within one tenant's hash tag or {global}.
func TestConformanceOnClusterNode(t *testing.T) {
	srv := startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	admin := srv.Client()
	ctx := context.Background()
	if err := admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(admin.ClusterInfo(ctx).Val(), "cluster_state:ok"); {
		if time.Now().After(deadline) {
			t.Fatal("cluster did not become ok")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The node refuses keys of different slots in one command.
	if err := admin.MSet(ctx, "a", 1, "b", 2).Err(); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("cluster node accepted a cross-slot MSET: %v", err)
	}
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) vault.Backend {
		return srv.open(t, Config{
			KeyPrefix:      strings.ReplaceAll(t.Name(), "/", ":") + ":",
			MaxBytes:       cfg.MaxBytes,
			TenantMaxBytes: cfg.TenantMaxBytes,
			Retention:      cfg.Retention,
			Now:            cfg.Now,
			OpTimeout:      suiteTimeout,
		})
	}, storetest.Capacity, storetest.TenantQuota, storetest.LineageTTL, storetest.Persistent, storetest.Recovery, storetest.TenantRate)
}
