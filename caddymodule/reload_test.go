package caddymodule

import (
	"context"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

func poolLen(p *caddy.UsagePool) int {
	n := 0
	p.Range(func(_, _ any) bool { n++; return true })
	return n
}

// Reloads that change settings do not accumulate state (issue 12, item 8):
// 100 reloads, each changing token_budget, done the way Caddy does them
// (the new config's App and handler are provisioned, then the old
// handler and App cleaned up) leave exactly one counter, one compiler and
// one vault in the shared pools: what an old config released is dropped.
func TestReloadsReleaseCountersAndCompilers(t *testing.T) {
	dir := t.TempDir()
	type config struct {
		app    *App
		h      *Handler
		cancel context.CancelFunc
	}
	load := func(i int) config {
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		app := new(App)
		if err := app.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		h := &Handler{VaultDir: dir, TokenBudget: caddy.Duration(time.Duration(100+i) * time.Millisecond)}
		if err := h.provision(ctx, app); err != nil {
			t.Fatal(err)
		}
		if err := app.Start(); err != nil {
			t.Fatal(err)
		}
		return config{app, h, cancel}
	}
	unload := func(c config) {
		if err := c.h.Cleanup(); err != nil {
			t.Fatal(err)
		}
		if err := c.app.Cleanup(); err != nil {
			t.Fatal(err)
		}
		c.cancel()
	}
	cur := load(0)
	for i := 1; i <= 100; i++ {
		next := load(i)
		unload(cur)
		cur = next
		sh := cur.app.shared
		if v, c, p := poolLen(sh.vaults), poolLen(sh.counters), poolLen(sh.compilers); v != 1 || c != 1 || p != 1 {
			t.Fatalf("after reload %d: %d vaults, %d counters, %d compilers in the pools, want 1 each", i, v, c, p)
		}
	}
	unload(cur)
}
