//go:build unix

package redisvault

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// The cap is the fleet's: what one replica stored counts for the other.
func TestFleetSharesCapacity(t *testing.T) {
	srv := startServer(t)
	one := testArt(1, 20000)
	cap := 2*int64(len(one.Text)+len(one.Raw)) + 1000 // two artifacts fit, three do not
	cfg := Config{KeyPrefix: "cap:", MaxBytes: cap, TenantMaxBytes: cap, OpTimeout: suiteTimeout}
	a, b := srv.open(t, cfg), srv.open(t, cfg)
	ctx := context.Background()
	for i, st := range []*Store{a, b} {
		if err := st.Persist(ctx, artifact.Scope{Tenant: "t"}, []artifact.Artifact{testArt(i+1, 20000)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range []*Store{a, b} {
		err := st.Persist(ctx, artifact.Scope{Tenant: "u"}, []artifact.Artifact{testArt(9, 20000)})
		if !errors.Is(err, artifact.ErrFull) {
			t.Fatalf("third artifact on a fleet full of retained ones: %v, want ErrFull", err)
		}
	}
}

// A give-back lost to an outage leaves the fleet's counter high; the next
// eviction scan recounts it from the tenants' own counters, so the vault
// does not stay falsely full.
func TestCapacityCounterRecount(t *testing.T) {
	srv := startServer(t)
	one := testArt(1, 20000)
	cap := 3*int64(len(one.Text)+len(one.Raw)) + 1000
	st := srv.open(t, Config{MaxBytes: cap, TenantMaxBytes: cap, Retention: time.Hour, OpTimeout: suiteTimeout})
	ctx := context.Background()
	if err := st.Persist(ctx, artifact.Scope{Tenant: "t"}, []artifact.Artifact{one}); err != nil {
		t.Fatal(err)
	}
	global := st.k.global("bytes")
	admin := srv.Client()
	if err := admin.IncrBy(ctx, global, cap).Err(); err != nil { // the lost give-back
		t.Fatal(err)
	}
	if err := st.Persist(ctx, artifact.Scope{Tenant: "t"}, []artifact.Artifact{testArt(2, 20000)}); err != nil {
		t.Fatalf("persist after a counter drift: %v", err)
	}
	want := 2 * int64(len(one.Text)+len(one.Raw))
	if got, err := admin.Get(ctx, global).Int64(); err != nil || got < want-100 || got > want+100 {
		t.Fatalf("fleet counter %d after recount, want about %d (%v)", got, want, err)
	}
}

// Limits changed on the open store (a reload) are in force on the next
// write: a tenant over its lowered quota evicts its own expired artifacts
// down to it; bad limits are refused and change nothing.
func TestSetLimitsLowered(t *testing.T) {
	srv := startServer(t)
	one := testArt(1, 20000)
	size := int64(len(one.Text) + len(one.Raw))
	const retention = 50 * time.Millisecond
	st := srv.open(t, Config{KeyPrefix: "lim:", MaxBytes: 40 * size, TenantMaxBytes: 20 * size, Retention: retention, OpTimeout: suiteTimeout})
	ctx := context.Background()
	sc := artifact.Scope{Tenant: "t"}
	for i := range 6 {
		if err := st.Persist(ctx, sc, []artifact.Artifact{testArt(i+1, 20000)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetLimits(Limits{MaxBytes: size, TenantMaxBytes: 2 * size}); err == nil {
		t.Fatal("a quota above the capacity was accepted")
	}
	if got := st.Stats().MaxBytes; got != 40*size {
		t.Fatalf("a refused change changed the capacity to %d", got)
	}
	if err := st.SetLimits(Limits{MaxBytes: 40 * size, TenantMaxBytes: 3*size + size/2, OpTimeout: suiteTimeout}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * retention)
	if err := st.Persist(ctx, sc, []artifact.Artifact{testArt(7, 20000)}); err != nil {
		t.Fatalf("persist under the lowered quota: %v", err)
	}
	used, err := srv.Client().Get(ctx, st.k.tenant("t").bytes).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if used > 3*size+size/2 {
		t.Errorf("tenant holds %d bytes over its new quota of %d", used, 3*size+size/2)
	}
	if _, ok, _ := st.Get(ctx, "t", testArt(1, 20000).Digest); ok {
		t.Error("the oldest artifact survived the lowered quota")
	}
}
