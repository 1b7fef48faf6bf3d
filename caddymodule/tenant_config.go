package caddymodule

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// DefaultMaxNewTenantsPerMinute is the default max_new_tenants_per_minute:
// enough for an organisation's people to arrive in a morning, small enough
// that keys the provider accepts for anything (a local model server without
// authentication) cannot grow the vault's tenants fast.
const DefaultMaxNewTenantsPerMinute = 60

// TenantSettings are the settings of who becomes a tenant (verified.go).
type TenantSettings struct {
	// Most tenants the provider's answers may verify per minute, across
	// every gateway sharing the vault. A tenant holds vault state only
	// once the provider has answered one of its requests with a 2xx; past
	// the cap, unverified tenants pass through (passthrough=tenant_rate)
	// until the minute ends. Default: 60.
	MaxNewTenantsPerMinute *int `json:"max_new_tenants_per_minute,omitempty"`
}

func (h *Handler) applyTenantDefaults() {
	if h.MaxNewTenantsPerMinute == nil {
		h.MaxNewTenantsPerMinute = intp(DefaultMaxNewTenantsPerMinute)
	}
}

// clientSetPlaceholders are placeholder prefixes whose value any client
// can choose: a tenant taken from one is whatever the client says it is.
var clientSetPlaceholders = []string{
	"{http.request.header.", "{header.", "{http.request.cookie.", "{cookie.",
	"{http.request.uri", "{uri", "{query", "{path", "{http.request.host", "{host",
	"{http.request.orig_uri", "{http.request.body",
}

// warnClientIdentity warns at start when the tenant identity is taken
// from a part of the request a client sets: any client can then claim any
// tenant, unless a layer in front removes or overwrites that value.
func (h *Handler) warnClientIdentity() {
	if h.Tenant == "" {
		return
	}
	for _, p := range clientSetPlaceholders {
		if strings.Contains(h.Tenant, p) {
			h.logger.Warn("the tenant identity is taken from the request as the client sent it: any client can claim any tenant (and read its artifacts through the artifact API) unless a layer in front sets or removes that value; prefer an authenticated identity such as {http.auth.user.id}",
				zap.String("tenant", h.Tenant))
			return
		}
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

// cachedKey returns the vault backend's tenant key once it has been read
// (nil until then), for the data keys of encryption at rest; the read is
// never waited for on the request path.
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
