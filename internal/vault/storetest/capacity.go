package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// Each capacity artifact is 9000 ASCII bytes of text and 9002 of Raw.
const artBytes = 9000

// retentionEviction: a full store evicts least recently seen first (Missing
// and Record's Referenced count as sightings, Get does not), never inside the
// retention window; when nothing may go, Persist fails with ErrFull and
// nothing is lost.
func (s suite) retentionEviction(t *testing.T) {
	clk := newClock()
	t0 := clk.Now()
	arts := make([]artifact.Artifact, 6)
	for i := range arts {
		arts[i] = art(text(fmt.Sprintf("evict-%d", i), artBytes))
	}
	cap := 5*size(arts[0]) + size(arts[0])/2 // five fit, six do not
	st := s.open(t, Config{MaxBytes: cap, TenantMaxBytes: cap, Retention: time.Hour, Now: clk.Now})
	ctx := context.Background()
	sc := artifact.Scope{Tenant: "t"}

	for i := range 5 {
		clk.Set(t0.Add(time.Duration(i) * time.Minute))
		persist(t, st, "t", arts[i])
	}
	clk.Set(t0.Add(10 * time.Minute))
	if miss, err := st.Missing(ctx, sc, digests(arts[0])); err != nil || len(miss) != 0 {
		t.Fatalf("missing: %v %v", miss, err)
	}
	if err := st.Record(ctx, sc, artifact.Record{ChainEnd: chain("ev", 1)[0], Length: 1, Referenced: digests(arts[2])}); err != nil {
		t.Fatal(err)
	}
	clk.Set(t0.Add(11 * time.Minute))
	has(t, st, "t", arts[1]) // not a sighting
	// Least recently seen first: 1 (1m), 3 (3m), 4 (4m), 0 and 2 (10m).
	order := []artifact.Artifact{arts[1], arts[3], arts[4], arts[0], arts[2]}

	// Everything is inside the window: full, and nothing goes.
	clk.Set(t0.Add(30 * time.Minute))
	err := st.Persist(ctx, sc, arts[5:])
	if !errors.Is(err, artifact.ErrFull) {
		t.Fatalf("persist into a store full of retained artifacts: %v, want ErrFull", err)
	}
	for _, a := range order {
		if !has(t, st, "t", a) {
			t.Fatal("an artifact inside its retention window was evicted")
		}
	}

	// 1 and 3 have left the window (cutoff 3.5m), 4, 0 and 2 have not.
	clk.Set(t0.Add(time.Hour + 3*time.Minute + 30*time.Second))
	persist(t, st, "t", arts[5])
	if !has(t, st, "t", arts[5]) {
		t.Fatal("new artifact not stored after eviction")
	}
	evicted := 0
	for i, a := range order {
		present := has(t, st, "t", a)
		if !present && i != evicted {
			t.Fatalf("evicted artifact %d of the least-recently-seen order while an older one stayed", i)
		}
		if !present {
			evicted++
		}
	}
	if evicted == 0 || evicted > 2 {
		t.Fatalf("evicted %d artifacts, want 1 or 2 (only those outside retention)", evicted)
	}
}

// tooLarge: an artifact larger than the whole store is ErrFull, not stored.
func (s suite) tooLarge(t *testing.T) {
	st := s.open(t, Config{MaxBytes: 50_000, TenantMaxBytes: 50_000, Retention: time.Hour})
	a := art(text("huge", 60_000))
	err := st.Persist(context.Background(), artifact.Scope{Tenant: "t"}, []artifact.Artifact{a})
	if !errors.Is(err, artifact.ErrFull) {
		t.Fatalf("persist of %d bytes into a %d-byte store: %v, want ErrFull", size(a), 50_000, err)
	}
	if has(t, st, "t", a) {
		t.Fatal("oversized artifact stored")
	}
}

// tenantQuota: a tenant over TenantMaxBytes evicts its own least recently
// seen artifacts outside retention (never another tenant's, even older
// ones), then gets ErrFull; other tenants are unaffected.
func (s suite) tenantQuota(t *testing.T) {
	clk := newClock()
	t0 := clk.Now()
	mk := func(tenant string, i int) artifact.Artifact {
		return art(text(fmt.Sprintf("%s-%d", tenant, i), artBytes))
	}
	one := size(mk("a", 0))
	quota := 2*one + one/2 // two fit per tenant, three do not
	st := s.open(t, Config{MaxBytes: 20 * one, TenantMaxBytes: quota, Retention: time.Hour, Now: clk.Now})
	ctx := context.Background()

	clk.Set(t0.Add(-10 * time.Minute)) // b's artifacts are the oldest of all
	persist(t, st, "b", mk("b", 0), mk("b", 1))
	clk.Set(t0)
	persist(t, st, "a", mk("a", 0))
	clk.Set(t0.Add(time.Minute))
	persist(t, st, "a", mk("a", 1))

	clk.Set(t0.Add(30 * time.Minute))
	err := st.Persist(ctx, artifact.Scope{Tenant: "a"}, []artifact.Artifact{mk("a", 2)})
	if !errors.Is(err, artifact.ErrFull) {
		t.Fatalf("tenant over its quota, all inside retention: %v, want ErrFull", err)
	}
	persist(t, st, "c", mk("c", 0)) // another tenant is unaffected
	big := art(text("a-big", int(quota)))
	if err := st.Persist(ctx, artifact.Scope{Tenant: "c"}, []artifact.Artifact{big}); !errors.Is(err, artifact.ErrFull) {
		t.Fatalf("one artifact over the tenant quota: %v, want ErrFull", err)
	}

	// a-0 and both of b's have left the window (cutoff 30s); a must evict
	// its own a-0, not b's older ones.
	clk.Set(t0.Add(time.Hour + 30*time.Second))
	persist(t, st, "a", mk("a", 2))
	for _, c := range []struct {
		tenant string
		i      int
		want   bool
	}{{"a", 0, false}, {"a", 1, true}, {"a", 2, true}, {"b", 0, true}, {"b", 1, true}, {"c", 0, true}} {
		if got := has(t, st, c.tenant, mk(c.tenant, c.i)); got != c.want {
			t.Fatalf("%s-%d present=%v, want %v", c.tenant, c.i, got, c.want)
		}
	}
}
