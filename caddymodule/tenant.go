package caddymodule

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
)

// Tenants are keyed hashes of the request's identity: HMAC-SHA-256 under
// the tenant key, first 32 hex characters. The construction is the one the
// Badger vault used before the gateway took it over, so a vault's existing
// tenants keep their ids (TestTenantIDMatchesVault).

// tenantHasher returns the tenant function of key.
func tenantHasher(key []byte) tenantFunc {
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

// minTenantKeyBytes is the shortest operator tenant key accepted: shorter
// keys make tenant ids guessable from credentials.
const minTenantKeyBytes = 16

// resolveTenantKey is the operator's tenant_key (placeholders resolved once,
// e.g. {env.TT_TENANT_KEY} or {file./etc/tt/key}), else the vault
// backend's own persistent key.
func (h *Handler) resolveTenantKey(ov *openVault) ([]byte, error) {
	if h.TenantKey == "" {
		key, err := ov.tenantKey()
		if err != nil {
			return nil, fmt.Errorf("reading the vault's tenant key: %v", err)
		}
		return key, nil
	}
	// An unknown or empty placeholder is refused rather than taken as a
	// literal key (a typo would otherwise become everyone's key).
	v, err := caddy.NewReplacer().ReplaceOrErr(h.TenantKey, true, true)
	if err != nil {
		return nil, fmt.Errorf("tenant_key '%s': %v", h.TenantKey, err)
	}
	if len(v) < minTenantKeyBytes {
		// Name the setting, never the value it resolved to.
		return nil, fmt.Errorf("tenant_key '%s' resolves to %d bytes, want at least %d", h.TenantKey, len(v), minTenantKeyBytes)
	}
	return []byte(v), nil
}

// tenant returns the request's tenant id, "" when it has no identity.
// With a configured tenant identity, that identity alone decides: a
// credential never overrides it (clients behind an auth layer may all send
// the same placeholder key), and a request whose identity is empty has no
// tenant. Without one, the credential the provider authenticates the
// request by decides.
func (h *Handler) tenant(r *http.Request, format string) string {
	if h.Tenant != "" {
		repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
		if !ok {
			return ""
		}
		v := repl.ReplaceAll(h.Tenant, "")
		if v == "" {
			return ""
		}
		// Prefixed so that a configured identity never equals a credential.
		return h.tenants("tenant\x00" + v)
	}
	c := credential(r.Header, format)
	if format == geminiFormat {
		c = geminiCredential(r)
	}
	if c != "" {
		return h.tenants(c)
	}
	return ""
}

// Credential headers in the order providers authenticate by. Api-Key is
// Azure OpenAI's header; without it every Azure user would share one
// anonymous tenant. Anthropic authenticates by x-api-key first.
var (
	credentialHeaders          = []string{"Authorization", "X-Api-Key", "X-Goog-Api-Key", "Api-Key"}
	anthropicCredentialHeaders = []string{"X-Api-Key", "Authorization"}
)

// credential returns the request's API credential, the first of the
// headers its format's provider uses. It is only ever handed to the keyed
// hash. With no format (the artifact API, which serves every provider's
// clients) a request whose credential headers disagree has none: the
// formats' orders would pick different ones, and the API must find the
// tenant the request path finds for the same headers, whatever the format.
func credential(h http.Header, format string) string {
	if format == "" {
		c := ""
		for _, k := range credentialHeaders {
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
	keys := credentialHeaders
	if format == "anthropic_messages" {
		keys = anthropicCredentialHeaders
	}
	for _, k := range keys {
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
func (h *Handler) conversationID(tenant string, opening compiler.Digest) string {
	if h.tenants == nil || tenant == "" || opening == (compiler.Digest{}) {
		return ""
	}
	id := h.tenants("conversation\x00" + tenant + "\x00" + hex.EncodeToString(opening[:]))
	if id == "" {
		return ""
	}
	return "c_" + id
}

// session evaluates the session placeholder and hashes its value.
func (h *Handler) session(r *http.Request) string {
	if h.Session == "" {
		return ""
	}
	v := h.Session
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		v = repl.ReplaceAll(h.Session, "")
	}
	if v == "" {
		return ""
	}
	sum := sha256.Sum256([]byte("token-terminator session\x00" + v))
	return "s_" + hex.EncodeToString(sum[:16])
}
