//go:build unix

package redisvault

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/redisvault/redistest"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/storetest"
)

// startCluster starts a three-master Redis Cluster on loopback, the slots
// split in thirds, and returns its seed URL once every node reports ok.
func startCluster(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	type node struct {
		srv *server
		bus int
	}
	nodes := make([]node, 3)
	for i := range nodes {
		bus := redistest.FreePort(t)
		nodes[i] = node{startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", fmt.Sprint(bus), "--cluster-node-timeout", "5000"), bus}
	}
	slots := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i, n := range nodes {
		if err := n.srv.Client().Do(ctx, "CLUSTER", "ADDSLOTSRANGE", slots[i][0], slots[i][1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	first := nodes[0].srv.Client()
	for _, n := range nodes[1:] {
		if err := first.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.srv.Port, n.bus).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		ok := true
		for _, n := range nodes {
			info := n.srv.Client().ClusterInfo(ctx).Val()
			ok = ok && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3")
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("cluster did not become ok within 15s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Sprintf("redis://127.0.0.1:%d?addr=127.0.0.1:%d&addr=127.0.0.1:%d", nodes[0].srv.Port, nodes[1].srv.Port, nodes[2].srv.Port)
}

func openCluster(t testing.TB, cfg Config) *Store {
	t.Helper()
	cfg.Cluster = true
	st, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// On a three-master Redis Cluster (tenants spread over the masters, the
// fleet's counters on one), with the cluster client, the suite passes.
func TestClusterConformance(t *testing.T) {
	url := startCluster(t)
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) vault.Backend {
		return openCluster(t, Config{
			URL:            url,
			KeyPrefix:      strings.ReplaceAll(t.Name(), "/", ":") + ":",
			MaxBytes:       cfg.MaxBytes,
			TenantMaxBytes: cfg.TenantMaxBytes,
			Retention:      cfg.Retention,
			Now:            cfg.Now,
			OpTimeout:      suiteTimeout,
		})
	}, storetest.Capacity, storetest.TenantQuota, storetest.LineageTTL, storetest.Persistent, storetest.TenantRate)
}
