package caddymodule

import (
	"net/http"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/seal"
)

// Encryption at rest (internal/seal): the vault seals what a request
// stores, and opens what it reads, under data keys derived from the
// request's own secret and the tenant key. The secret is what decides the
// tenant (tenant.go): the configured identity when tenant is set, else the
// provider credential. Neither is stored, so the vault alone opens nothing.

// encrypting reports whether encryption at rest is on (the default).
func (h *Handler) encrypting() bool { return h.Encrypt == nil || *h.Encrypt }

// tenantSecret returns the secret the request's data keys derive from,
// "" when it has no tenant. It decides exactly as tenant does.
func (h *Handler) tenantSecret(r *http.Request, format string) string {
	if h.Tenant != "" {
		repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
		if !ok {
			return ""
		}
		if v := repl.ReplaceAll(h.Tenant, ""); v != "" {
			return "tenant\x00" + v
		}
		return ""
	}
	return credential(r.Header, format)
}

// sealed returns r carrying its tenant's data keys in its context, or r
// itself when encryption is off or the request has no tenant secret (it
// then gets no vault state either).
func (h *Handler) sealed(r *http.Request, format string) *http.Request {
	if !h.encrypting() || h.sealKey == nil {
		return r
	}
	secret := h.tenantSecret(r, format)
	if secret == "" {
		return r
	}
	key := h.sealKey()
	if key == nil {
		return r // the tenant key is not readable yet: no tenant either
	}
	k, err := seal.Derive(key, secret)
	if err != nil {
		h.logger.Warn("data keys not derived; the request is not compiled", zap.Error(err))
		return r
	}
	return r.WithContext(seal.NewContext(r.Context(), k))
}

// cachedKey returns the vault backend's tenant key once it has been read
// (nil until then); the read is never waited for on the request path.
func cachedKey(ov *openVault) func() []byte {
	var key atomic.Pointer[[]byte]
	return func() []byte {
		if k := key.Load(); k != nil {
			return *k
		}
		k, ok := ov.tryTenantKey()
		if !ok {
			return nil
		}
		key.Store(&k)
		return k
	}
}

// keyID is the compiler's keyed naming under k (nil without keys): the
// vault accepts only keyed ids from a request that carries keys.
func keyID(k *seal.Keys) func(compiler.Digest) compiler.Digest {
	if k == nil {
		return nil
	}
	return func(d compiler.Digest) compiler.Digest { return k.ID(d) }
}
