package caddymodule

import (
	"fmt"
	"strings"

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

func init() {
	subdirectives["max_new_tenants_per_minute"] = func(t *Handler, v string) error {
		return setInt(&t.MaxNewTenantsPerMinute, v, 1)
	}
}

func (h *Handler) applyTenantDefaults() {
	if h.MaxNewTenantsPerMinute == nil {
		h.MaxNewTenantsPerMinute = intp(DefaultMaxNewTenantsPerMinute)
	}
}

func (h *Handler) checkTenant() error {
	if *h.MaxNewTenantsPerMinute < 1 {
		return fmt.Errorf("max_new_tenants_per_minute must be at least 1, got %d", *h.MaxNewTenantsPerMinute)
	}
	return nil
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
