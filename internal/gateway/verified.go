package gateway

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
)

// Verified tenants. A request's tenant holds vault state (artifacts,
// leases, lineage, artifact API access, ledger records) only once the
// provider has answered one of its requests with a 2xx: until then its
// requests pass through uncompiled (passthrough=unverified_tenant), and
// the first 2xx answer adds it to the vault's verified set, which every
// gateway on the vault shares. An answer of 401 or 403 to a verified
// tenant removes it again. The set holds tenant ids (keyed hashes), never
// credentials. New tenants are capped per minute (max_new_tenants_per_minute);
// past the cap, unverified tenants pass through with passthrough=tenant_rate
// until the minute ends.

// tenantVerifier is the vault's verified set (vault.Backend).
type tenantVerifier interface {
	VerifyTenant(ctx context.Context, tenant string, maxNew int) (bool, error)
	TenantVerified(ctx context.Context, tenant string) (bool, error)
	RevokeTenant(ctx context.Context, tenant string) error
}

const (
	// gateCacheTTL is how long a tenant the vault confirmed verified is
	// taken as verified without asking again: a revocation by another
	// gateway of the fleet reaches this one within it.
	gateCacheTTL = 10 * time.Second
	// gateRefresh is how often a verified tenant's record is renewed on a
	// 2xx answer, so an active tenant's record never reaches Retention.
	gateRefresh = time.Hour
	// gateCacheMax bounds the cache; past it, it starts over.
	gateCacheMax = 1 << 16
	// gateTimeout bounds one call to the verified set.
	gateTimeout = time.Second
)

// TenantGate answers, for the request path, whether a tenant is verified,
// and records the provider's verdict on the response path.
type TenantGate struct {
	store  tenantVerifier
	maxNew int
	log    *zap.Logger
	now    func() time.Time

	mu    sync.Mutex
	known map[string]gateEntry
	// rateUntil (unix nanos) is the end of the minute in which the
	// vault refused a new tenant: until then new tenants are not tried.
	rateUntil atomic.Int64
}

type gateEntry struct {
	checked   time.Time // the vault last confirmed the tenant verified
	refreshed time.Time // this gateway last renewed its record
}

func NewTenantGate(store tenantVerifier, maxNew int, log *zap.Logger) *TenantGate {
	return &TenantGate{store: store, maxNew: maxNew, log: log, now: time.Now, known: map[string]gateEntry{}}
}

// check reports whether tenant may use state; when it may not, the
// pass-through reason and, for vault_error, the detail.
func (g *TenantGate) check(ctx context.Context, tenant string) (ok bool, reason compiler.Reason, detail string) {
	now := g.now()
	g.mu.Lock()
	e, hit := g.known[tenant]
	g.mu.Unlock()
	if hit && now.Sub(e.checked) < gateCacheTTL {
		return true, "", ""
	}
	ctx, cancel := context.WithTimeout(ctx, gateTimeout)
	defer cancel()
	v, err := g.store.TenantVerified(ctx, tenant)
	if err != nil {
		return false, compiler.ReasonVaultError, "verified tenants: " + err.Error()
	}
	if v {
		g.remember(tenant, now, e.refreshed)
		return true, "", ""
	}
	g.forget(tenant)
	if now.UnixNano() < g.rateUntil.Load() {
		return false, ReasonTenantRate, ""
	}
	return false, ReasonUnverifiedTenant, ""
}

func (g *TenantGate) remember(tenant string, checked, refreshed time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.known[tenant]; !ok && len(g.known) >= gateCacheMax {
		g.known = map[string]gateEntry{}
	}
	g.known[tenant] = gateEntry{checked: checked, refreshed: refreshed}
}

func (g *TenantGate) forget(tenant string) {
	g.mu.Lock()
	delete(g.known, tenant)
	g.mu.Unlock()
}

// settle records the provider's answer to a request of tenant: a 2xx
// verifies an unverified tenant (within the new-tenant cap) and renews a
// verified one's record now and then; 401 or 403 revokes a verified one.
// It runs after the answer was written; each call is bounded by
// gateTimeout.
func (g *TenantGate) settle(tenant string, wasVerified bool, reason compiler.Reason, status int) {
	if tenant == "" {
		return
	}
	now := g.now()
	ctx, cancel := context.WithTimeout(context.Background(), gateTimeout)
	defer cancel()
	switch {
	case status >= 200 && status <= 299:
		if wasVerified {
			g.mu.Lock()
			e, ok := g.known[tenant]
			g.mu.Unlock()
			if ok && now.Sub(e.refreshed) < gateRefresh {
				return
			}
		} else if reason != ReasonUnverifiedTenant {
			return // tenant_rate or a vault that did not answer: not tried
		}
		ok, err := g.store.VerifyTenant(ctx, tenant, g.maxNew)
		switch {
		case err != nil:
			g.log.Warn("the provider accepted a request but its tenant could not be recorded as verified", zap.Error(err))
		case ok:
			g.remember(tenant, now, now)
		default:
			// The cap was reached in this minute: new tenants pass through
			// (tenant_rate) until it ends.
			end := now.Truncate(time.Minute).Add(time.Minute)
			g.rateUntil.Store(end.UnixNano())
			g.log.Warn("new tenant not verified: max_new_tenants_per_minute reached; new tenants pass through (passthrough=tenant_rate) until the minute ends",
				zap.Int("max_new_tenants_per_minute", g.maxNew))
		}
	case wasVerified && (status == http.StatusUnauthorized || status == http.StatusForbidden):
		g.forget(tenant)
		if err := g.store.RevokeTenant(ctx, tenant); err != nil {
			g.log.Warn("the provider refused a verified tenant's credential but the tenant could not be revoked", zap.Int("status", status), zap.Error(err))
			return
		}
		g.log.Info("the provider refused a verified tenant's credential; the tenant is no longer verified (no vault state, no artifact API) until a request of it is accepted again",
			zap.String("tenant", tenant), zap.Int("status", status))
	}
}
