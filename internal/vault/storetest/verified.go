package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

func verified(t *testing.T, st vault.Backend, tenant string) bool {
	t.Helper()
	ok, err := st.TenantVerified(context.Background(), tenant)
	if err != nil {
		t.Fatalf("TenantVerified(%q): %v", tenant, err)
	}
	return ok
}

// verifiedTenants: a tenant is unverified until VerifyTenant, verified
// after it, unverified again after RevokeTenant; tenants are apart (one
// whose name extends another's included); verifying twice is idempotent;
// the set holds no state of its own that Persist or Record would need.
func (s suite) verifiedTenants(t *testing.T) {
	st := s.open(t, Config{})
	ctx := context.Background()
	if verified(t, st, "t1") || verified(t, st, "") {
		t.Fatal("a tenant nobody verified is verified")
	}
	for range 2 {
		ok, err := st.VerifyTenant(ctx, "t1", 0)
		if err != nil || !ok {
			t.Fatalf("VerifyTenant(t1) = %v, %v", ok, err)
		}
	}
	if !verified(t, st, "t1") {
		t.Fatal("t1 not verified after VerifyTenant")
	}
	for _, other := range []string{"t2", "t1/x", "t", "T1"} {
		if verified(t, st, other) {
			t.Fatalf("verifying t1 verified %q", other)
		}
	}
	// Storing artifacts does not verify a tenant.
	persist(t, st, "t3", art(text("verified", 9000)))
	if verified(t, st, "t3") {
		t.Fatal("persisting verified a tenant")
	}
	if _, err := st.VerifyTenant(ctx, "", 0); err == nil {
		t.Fatal("VerifyTenant accepted the empty tenant")
	}
	if err := st.RevokeTenant(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if verified(t, st, "t1") {
		t.Fatal("t1 still verified after RevokeTenant")
	}
	if err := st.RevokeTenant(ctx, "never-verified"); err != nil {
		t.Fatalf("revoking an unknown tenant: %v", err)
	}
	// Verified again after a revocation: a later 2xx answer restores it.
	if ok, err := st.VerifyTenant(ctx, "t1", 0); err != nil || !ok {
		t.Fatalf("VerifyTenant after revoke = %v, %v", ok, err)
	}
	if !verified(t, st, "t1") {
		t.Fatal("t1 not verified again")
	}
}

// verifiedReopen: the verified set survives a restart.
func (s suite) verifiedReopen(t *testing.T) {
	st := s.open(t, Config{})
	ctx := context.Background()
	for _, tn := range []string{"kept", "revoked"} {
		if ok, err := st.VerifyTenant(ctx, tn, 0); err != nil || !ok {
			t.Fatalf("VerifyTenant(%s) = %v, %v", tn, ok, err)
		}
	}
	if err := st.RevokeTenant(ctx, "revoked"); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = s.open(t, Config{})
	if !verified(t, st, "kept") {
		t.Fatal("a verified tenant was forgotten across a reopen")
	}
	if verified(t, st, "revoked") {
		t.Fatal("a revoked tenant came back after a reopen")
	}
}

// newTenantRate: at most maxNew new tenants per minute of the clock;
// tenants already verified are refreshed whatever the count; the next
// minute has its own count.
func (s suite) newTenantRate(t *testing.T) {
	clk := newClock()
	clk.Set(time.Date(2026, 1, 1, 10, 0, 5, 0, time.UTC))
	st := s.open(t, Config{Now: clk.Now})
	ctx := context.Background()
	verify := func(tn string) bool {
		t.Helper()
		ok, err := st.VerifyTenant(ctx, tn, 3)
		if err != nil {
			t.Fatalf("VerifyTenant(%s): %v", tn, err)
		}
		return ok
	}
	for i := range 3 {
		if !verify(fmt.Sprint("new-", i)) {
			t.Fatalf("new tenant %d of 3 refused", i)
		}
	}
	if verify("new-3") || verified(t, st, "new-3") {
		t.Fatal("a fourth new tenant in one minute was verified")
	}
	if !verify("new-0") {
		t.Fatal("a verified tenant was refused its refresh at the cap")
	}
	clk.Set(clk.Now().Add(time.Minute))
	if !verify("new-3") || !verified(t, st, "new-3") {
		t.Fatal("the next minute did not admit a new tenant")
	}
	// The cap counts tenants, not artifacts: state of a verified tenant is
	// unaffected.
	persist(t, st, "new-3", art(text("rate", 9000)))
	if _, ok, err := st.Get(ctx, "new-3", art(text("rate", 9000)).Digest); err != nil || !ok {
		t.Fatalf("Get after verification: %v %v", ok, err)
	}
}
