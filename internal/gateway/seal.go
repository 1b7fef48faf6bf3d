package gateway

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/seal"
)

// Encryption at rest (internal/seal): the vault seals what a request
// stores, and opens what it reads, under data keys derived from the
// request's own secret and the tenant key. The secret is what decides the
// tenant (tenant.go): the configured identity when tenant is set, else the
// provider credential. Neither is stored, so the vault alone opens nothing.

// encrypting reports whether the request path seals what it stores.
func (g *Gateway) encrypting() bool { return g.Encrypt && g.SealKey != nil }

// tenantSecret returns what decides the request's tenant (tenant hashes
// it) and its data keys derive from, "" when it has none: the configured
// identity, prefixed so that it never equals a credential, else the
// provider credential.
func (g *Gateway) tenantSecret(r *http.Request, format provider.Format) string {
	if g.Tenant != "" {
		repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
		if !ok {
			return ""
		}
		if v := repl.ReplaceAll(g.Tenant, ""); v != "" {
			return "tenant\x00" + v
		}
		return ""
	}
	return requestCredential(r, format)
}

// sealed returns r carrying its tenant's data keys in its context, or r
// itself when encryption is off or the request has no tenant secret (it
// then gets no vault state either).
func (g *Gateway) sealed(r *http.Request, format provider.Format) *http.Request {
	if !g.encrypting() {
		return r
	}
	secret := g.tenantSecret(r, format)
	if secret == "" {
		return r
	}
	key := g.SealKey()
	if key == nil {
		return r // the tenant key is not readable yet: no tenant either
	}
	k, err := seal.Derive(key, secret)
	if err != nil {
		g.Logger.Warn("data keys not derived; the request is not compiled", zap.Error(err))
		return r
	}
	return r.WithContext(seal.NewContext(r.Context(), k))
}

// keyID is the compiler's keyed naming under k (nil without keys): the
// vault accepts only keyed ids from a request that carries keys.
func keyID(k *seal.Keys) func(artifact.Digest) artifact.Digest {
	if k == nil {
		return nil
	}
	return func(d artifact.Digest) artifact.Digest { return k.ID(d) }
}
