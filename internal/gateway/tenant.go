package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"

	"github.com/caddyserver/caddy/v2"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// Tenants are keyed hashes of the request's identity: HMAC-SHA-256 under
// the tenant key, first 32 hex characters. The construction is the one the
// Badger vault used before the gateway took it over, so a vault's existing
// tenants keep their ids (TestTenantIDMatchesVault).

// TenantHasher returns the tenant function of key.
func TenantHasher(key []byte) TenantFunc {
	key = append([]byte(nil), key...)
	return func(identity string) string {
		if identity == "" {
			return ""
		}
		m := hmac.New(sha256.New, key)
		m.Write([]byte(identity))
		return hex.EncodeToString(m.Sum(nil))[:32]
	}
}

// tenant returns the request's tenant id, "" when it has no identity.
// With a configured tenant identity, that identity alone decides: a
// credential never overrides it (clients behind an auth layer may all send
// the same placeholder key), and a request whose identity is empty has no
// tenant. Without one, the credential the provider authenticates the
// request by decides.
func (g *Gateway) tenant(r *http.Request, format provider.Format) string {
	if secret := g.tenantSecret(r, format); secret != "" {
		return g.Tenants(secret)
	}
	return ""
}

// credential returns the request's API credential, the first of the
// headers its format's provider uses. It is only ever handed to the keyed
// hash. With no format (the artifact API, which serves every provider's
// clients) a request whose credential headers disagree has none: the
// formats' orders would pick different ones, and the API must find the
// tenant the request path finds for the same headers, whatever the format.
func credential(h http.Header, format provider.Format) string {
	if format == "" {
		c := ""
		for _, k := range format.CredentialHeaders() {
			v := h.Get(k)
			switch {
			case v == "":
			case c == "":
				c = v
			case v != c:
				return ""
			}
		}
		return c
	}
	for _, k := range format.CredentialHeaders() {
		if v := h.Get(k); v != "" {
			return v
		}
	}
	return ""
}

// conversationID is the ledger's id of a conversation: a keyed hash under
// the tenant key of the tenant and the conversation's opening, 128 bits,
// so it confirms nothing about a guessed prompt without the key and
// cannot be ground to equal another's.
func (g *Gateway) conversationID(tenant string, opening artifact.Digest) string {
	if g.Tenants == nil || tenant == "" || opening == (artifact.Digest{}) {
		return ""
	}
	id := g.Tenants("conversation\x00" + tenant + "\x00" + hex.EncodeToString(opening[:]))
	if id == "" {
		return ""
	}
	return "c_" + id
}

// session evaluates the session placeholder and hashes its value.
func (g *Gateway) session(r *http.Request) string {
	if g.Session == "" {
		return ""
	}
	v := g.Session
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		v = repl.ReplaceAll(g.Session, "")
	}
	if v == "" {
		return ""
	}
	sum := sha256.Sum256([]byte("token-terminator session\x00" + v))
	return "s_" + hex.EncodeToString(sum[:16])
}
