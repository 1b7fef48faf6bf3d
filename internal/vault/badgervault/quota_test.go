package badgervault

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// One tenant filling its quota neither stops another tenant nor loses the
// other tenant's artifacts; past retention it evicts its own oldest first.
func TestTenantQuota(t *testing.T) {
	clk := newClock()
	const retention = time.Hour
	art := func(tenant string, i int) artifact.Artifact { return mkArt(text(fmt.Sprint(tenant, i), 2000)) }
	size := func() int64 { a := art("x", 0); return vault.ArtifactSize(&a) }()
	// Default quota: a quarter of the cap, here 2 artifacts of 8.
	s := openTest(t, Config{MaxBytes: 8*size + size/2, Retention: retention, now: clk.Now})
	ctx := context.Background()
	A, B := artifact.Scope{Tenant: "A"}, artifact.Scope{Tenant: "B"}
	persist := func(sc artifact.Scope, i int) error {
		return s.Persist(ctx, sc, []artifact.Artifact{art(sc.Tenant, i)})
	}
	has := func(sc artifact.Scope, i int) bool {
		_, ok, err := s.Get(ctx, sc.Tenant, art(sc.Tenant, i).Digest)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	for i := range 2 {
		must(t, persist(A, i))
		clk.Add(time.Minute)
	}
	// A is at its quota, with everything inside retention.
	err := persist(A, 2)
	if !errors.Is(err, vault.ErrFull) || !errors.Is(err, artifact.ErrFull) {
		t.Fatalf("Persist over quota = %v, want ErrFull", err)
	}
	// B is unaffected, though the vault has room for 6 more of A's.
	for i := range 2 {
		if err := persist(B, i); err != nil {
			t.Fatalf("tenant B: %v", err)
		}
	}
	if err := persist(B, 2); !errors.Is(err, vault.ErrFull) {
		t.Fatalf("tenant B over its own quota = %v", err)
	}
	// Verifying what A has stored needs no room.
	must(t, persist(A, 1))

	// Past retention A's least recently seen (0) goes; 1 was seen again.
	clk.Add(retention)
	must(t, persist(B, 1)) // B's 1 is seen again too
	must(t, persist(A, 2))
	if has(A, 0) || !has(A, 1) || !has(A, 2) {
		t.Errorf("A after own eviction: 0=%v 1=%v 2=%v, want false true true", has(A, 0), has(A, 1), has(A, 2))
	}
	// Evicting for A's quota never touched B, though B's 0 had expired too.
	if !has(B, 0) || !has(B, 1) {
		t.Errorf("B lost artifacts to A's quota: 0=%v 1=%v", has(B, 0), has(B, 1))
	}
	if got := s.tenants.used("A"); got != 2*size {
		t.Errorf("A uses %d bytes, want %d", got, 2*size)
	}
	if got := s.tenants.used("B"); got != 2*size {
		t.Errorf("B uses %d bytes, want %d", got, 2*size)
	}
	// Per-tenant usage survives a restart (rebuilt from metadata).
	dir := s.db.Opts().Dir
	must(t, s.Close())
	s2 := openTest(t, Config{Dir: dir, MaxBytes: 8*size + size/2, Retention: retention, now: clk.Now})
	if s2.tenants.used("A") != 2*size || s2.tenants.used("B") != 2*size {
		t.Errorf("after reopen: A %d, B %d", s2.tenants.used("A"), s2.tenants.used("B"))
	}
	s = s2
	if err := persist(A, 3); !errors.Is(err, vault.ErrFull) {
		t.Errorf("quota not enforced after reopen: %v", err)
	}
}

func TestTenantQuotaConfig(t *testing.T) {
	tests := []struct {
		max, tenant, want int64
	}{
		{1000, 0, 250},
		{1000, 100, 100},
		{1000, 5000, 1000},
		{0, 0, vault.DefaultMaxBytes / 4},
	}
	for _, tt := range tests {
		s := openTest(t, Config{MaxBytes: tt.max, TenantMaxBytes: tt.tenant})
		if s.maxTenant.Load() != tt.want {
			t.Errorf("MaxBytes %d TenantMaxBytes %d: quota %d, want %d", tt.max, tt.tenant, s.maxTenant.Load(), tt.want)
		}
	}
}

// A tenant whose id is a prefix of another's ("a" and "a/b") evicts only
// its own artifacts.
func TestTenantQuotaPrefix(t *testing.T) {
	clk := newClock()
	art := func(tenant string, i int) artifact.Artifact { return mkArt(text(fmt.Sprint(tenant, i), 2000)) }
	size := func() int64 { a := art("x", 0); return vault.ArtifactSize(&a) }()
	s := openTest(t, Config{MaxBytes: 8*size + size/2, Retention: time.Hour, now: clk.Now})
	ctx := context.Background()
	for _, tenant := range []string{"a/b", "a"} {
		for i := range 2 {
			must(t, s.Persist(ctx, artifact.Scope{Tenant: tenant}, []artifact.Artifact{art(tenant, i)}))
		}
	}
	clk.Add(2 * time.Hour) // everything has left its window
	must(t, s.Persist(ctx, artifact.Scope{Tenant: "a"}, []artifact.Artifact{art("a", 2)}))
	for i := range 2 {
		if _, ok, _ := s.Get(ctx, "a/b", art("a/b", i).Digest); !ok {
			t.Errorf(`tenant "a/b" lost artifact %d to tenant "a"'s quota`, i)
		}
	}
	if _, ok, _ := s.Get(ctx, "a", art("a", 0).Digest); ok {
		t.Error(`tenant "a" kept its oldest artifact past its quota`)
	}
}

// Limits lowered on the open vault (a reload) are in force on the next
// write: a tenant over its new quota evicts its own expired artifacts down
// to it, and one over the new capacity gets ErrFull while nothing has
// expired.
func TestSetLimitsLowered(t *testing.T) {
	clk := newClock()
	const retention = time.Hour
	art := func(tenant string, i int) artifact.Artifact { return mkArt(text(fmt.Sprint(tenant, i), 2000)) }
	size := func() int64 { a := art("x", 0); return vault.ArtifactSize(&a) }()
	s := openTest(t, Config{MaxBytes: 40 * size, TenantMaxBytes: 20 * size, Retention: retention, now: clk.Now})
	ctx := context.Background()
	A := artifact.Scope{Tenant: "A"}
	for i := range 6 {
		must(t, s.Persist(ctx, A, []artifact.Artifact{art("A", i)}))
		clk.Add(time.Minute)
	}
	s.SetLimits(40*size, 3*size)
	if got := s.Stats().MaxBytes; got != 40*size {
		t.Fatalf("MaxBytes %d, want %d", got, 40*size)
	}
	// Inside retention nothing may go: over the new quota is full.
	if err := s.Persist(ctx, A, []artifact.Artifact{art("A", 6)}); !errors.Is(err, vault.ErrFull) {
		t.Fatalf("Persist over the lowered quota inside retention = %v, want ErrFull", err)
	}
	clk.Add(retention)
	must(t, s.Persist(ctx, A, []artifact.Artifact{art("A", 6)}))
	if used := s.tenants.used("A"); used > 3*size {
		t.Errorf("tenant A holds %d bytes over its new quota of %d", used, 3*size)
	}
	if _, ok, _ := s.Get(ctx, "A", art("A", 0).Digest); ok {
		t.Error("the oldest artifact survived the lowered quota")
	}
	// A quota of 0 takes the default, max/4.
	s.SetLimits(size, 0)
	if got := s.maxTenant.Load(); got != size/4 {
		t.Errorf("default quota %d, want %d", got, size/4)
	}
	// A capacity lowered below one artifact refuses it.
	s.SetLimits(size/2, size/2)
	if err := s.Persist(ctx, artifact.Scope{Tenant: "B"}, []artifact.Artifact{art("B", 0)}); !errors.Is(err, vault.ErrFull) {
		t.Errorf("Persist over the lowered capacity = %v, want ErrFull", err)
	}
}
