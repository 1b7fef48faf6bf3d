package caddymodule

import (
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/gateway"
)

// backendTenants returns the tenant function of the vault backend's own
// key, and nil; or, when the key cannot be read now (a Redis vault that is
// down at start), a function that gives no tenant until the key is read,
// and the function reporting that it is still pending. Caddy starts either
// way: until the key is read, requests with a credential pass through
// (vault_error), and each one may try the read again (at most once per
// tenantKeyRetry, never waiting for another's), so the gateway resumes
// without a reload. Tenants are never computed under any other key.
func (h *Handler) backendTenants(ov *openVault, vaultKey string) (gateway.TenantFunc, func() bool) {
	key, err := ov.tenantKey()
	if err == nil {
		return gateway.TenantHasher(key), nil
	}
	h.logger.Warn("the vault's tenant key is not readable; candidates pass through (passthrough=vault_error) until it is",
		zap.String("vault", vaultKey), zap.Error(err))
	var ready atomic.Pointer[gateway.TenantFunc]
	tenants := func(identity string) string {
		if f := ready.Load(); f != nil {
			return (*f)(identity)
		}
		key, ok := ov.tryTenantKey()
		if !ok {
			return ""
		}
		f := gateway.TenantHasher(key)
		if ready.CompareAndSwap(nil, &f) {
			h.logger.Info("the vault's tenant key was read; candidates are compiled again", zap.String("vault", vaultKey))
		}
		return f(identity)
	}
	pending := func() bool { return ready.Load() == nil }
	return tenants, pending
}
