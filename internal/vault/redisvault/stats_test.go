//go:build unix

package redisvault

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// fresh makes st's next Stats read the fleet's sizes again (they are
// cached for statsEvery).
func fresh(st *Store) *Store {
	st.sizes.mu.Lock()
	st.sizes.at = time.Time{}
	st.sizes.mu.Unlock()
	return st
}

// clock is a settable test clock, shared by a fleet.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// Stats on a fleet: the sizes are the fleet's, so two replicas report the
// same artifacts and bytes whoever stored them; the counters are each
// replica's own, written, verified and evicted as its calls did them.
func TestStatsFleet(t *testing.T) {
	srv := startServer(t)
	arts := []artifact.Artifact{testArt(1, 20000), testArt(2, 20000), testArt(3, 20000), testArt(4, 20000)}
	size := func(is ...int) (n int64) {
		for _, i := range is {
			n += int64(len(arts[i].Text) + len(arts[i].Raw))
		}
		return n
	}
	one := arts[0]
	capBytes := size(0, 1, 2) + 1000 // three artifacts fit, four do not
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	cfg := Config{KeyPrefix: "stats:", MaxBytes: capBytes, TenantMaxBytes: capBytes, Retention: time.Hour,
		OpTimeout: suiteTimeout, Now: clk.now}
	a, b := srv.open(t, cfg), srv.open(t, cfg)
	ctx := context.Background()
	persist := func(st *Store, tenant string, arts ...artifact.Artifact) {
		t.Helper()
		if err := st.Persist(ctx, artifact.Scope{Tenant: tenant}, arts); err != nil {
			t.Fatal(err)
		}
	}
	if st := a.Stats(); st != (vault.Stats{MaxBytes: capBytes}) {
		t.Fatalf("empty fleet: %+v", st)
	}
	persist(a, "t", one)
	clk.add(time.Second) // distinct last-seen times: a known eviction order
	persist(b, "u", arts[1])
	persist(b, "t", one) // already stored by a: verified, not written (nor re-seen: within touchAfter)
	clk.add(time.Second)
	persist(a, "u", arts[2], arts[2])

	type want struct {
		artifacts, bytes           int64
		written, verified, evicted uint64
	}
	check := func(name string, st *Store, w want) {
		t.Helper()
		got := fresh(st).Stats()
		if got.Artifacts != w.artifacts || got.Bytes != w.bytes || got.MaxBytes != capBytes ||
			got.Written != w.written || got.Verified != w.verified || got.Evicted != w.evicted || got.Corrupt != 0 {
			t.Fatalf("%s: Stats %+v, want %+v (max %d)", name, got, w, capBytes)
		}
	}
	check("replica a", a, want{artifacts: 3, bytes: size(0, 1, 2), written: 2})
	check("replica b", b, want{artifacts: 3, bytes: size(0, 1, 2), written: 1, verified: 1})

	// Out of the retention window, a fourth artifact evicts the least
	// recently seen ones, on the replica that needed the room, down to the
	// cap minus what it needs minus 5% slack: one and arts[1].
	clk.add(2 * time.Hour)
	persist(b, "v", arts[3])
	check("a after b evicted", a, want{artifacts: 2, bytes: size(2, 3), written: 2})
	check("b after it evicted", b, want{artifacts: 2, bytes: size(2, 3), written: 2, verified: 1, evicted: 2})

	// The sizes are cached: a scrape right after a write may lag by up to
	// statsEvery, but does not ask Redis again.
	before := a.Stats()
	srv.Client().FlushAll(ctx)
	if got := a.Stats(); got.Artifacts != before.Artifacts || got.Bytes != before.Bytes {
		t.Fatalf("cached sizes re-read within statsEvery: %+v then %+v", before, got)
	}
	check("after FLUSHALL", a, want{written: 2})
}

// A server that does not answer makes Stats report the last sizes read,
// within its own bound, so a scrape never hangs on Redis.
func TestStatsServerDown(t *testing.T) {
	srv := startServer(t)
	st := srv.open(t, Config{KeyPrefix: "down:", OpTimeout: opTimeout})
	art := testArt(1, 9000)
	if err := st.Persist(context.Background(), artifact.Scope{Tenant: "t"}, []artifact.Artifact{art}); err != nil {
		t.Fatal(err)
	}
	if got := fresh(st).Stats(); got.Artifacts != 1 {
		t.Fatalf("Stats %+v, want 1 artifact", got)
	}
	srv.Pause()
	defer srv.Resume()
	t0 := time.Now()
	got := fresh(st).Stats()
	if d := time.Since(t0); d > statsTimeout+bound {
		t.Fatalf("Stats took %v with the server paused", d)
	}
	if got.Artifacts != 1 || got.Bytes != int64(len(art.Text)+len(art.Raw)) || got.Written != 1 {
		t.Fatalf("Stats with the server paused: %+v, want the last sizes", got)
	}
}

// A tenant over its quota evicts its own artifacts inside the write
// script; those count as evictions too.
func TestStatsTenantQuotaEvictions(t *testing.T) {
	srv := startServer(t)
	a1, a2, a3 := testArt(1, 20000), testArt(2, 20000), testArt(3, 20000)
	quota := int64(len(a1.Text)+len(a1.Raw)+len(a2.Text)+len(a2.Raw)) + 1000
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	st := srv.open(t, Config{KeyPrefix: "quota:", TenantMaxBytes: quota, Retention: time.Hour, OpTimeout: suiteTimeout, Now: clk.now})
	ctx := context.Background()
	for _, a := range []artifact.Artifact{a1, a2} {
		if err := st.Persist(ctx, artifact.Scope{Tenant: "t"}, []artifact.Artifact{a}); err != nil {
			t.Fatal(err)
		}
		clk.add(time.Second)
	}
	clk.add(2 * time.Hour)
	if err := st.Persist(ctx, artifact.Scope{Tenant: "t"}, []artifact.Artifact{a3}); err != nil {
		t.Fatal(err)
	}
	got := fresh(st).Stats()
	if got.Evicted == 0 || got.Artifacts != 3-int64(got.Evicted) || got.Written != 3 {
		t.Fatalf("Stats after a quota eviction: %+v", got)
	}
}
