package caddymodule

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// bypassValue is the value of the bypass header that asks for no compile.
const bypassValue = "bypass"

// bypassed reports whether the client asked for its request to go
// upstream untouched, and removes the header: it is the gateway's, not the
// provider's. Other values of the header are removed too, and ignored.
func (h *Handler) bypassed(r *http.Request) bool {
	name := h.BypassHeader
	if name == "" {
		name = DefaultBypassHeader
	}
	v, ok := r.Header[http.CanonicalHeaderKey(name)]
	if !ok {
		return false
	}
	r.Header.Del(name)
	return len(v) > 0 && strings.EqualFold(strings.TrimSpace(v[0]), bypassValue)
}

// tenantIDLen is the length of a tenant id (hex digits of its keyed
// hash), which a tenant label names whole.
const tenantIDLen = 32

// checkObserve validates the observability settings.
func (h *Handler) checkObserve() error {
	if strings.TrimSpace(h.BypassHeader) == "" || strings.ContainsAny(h.BypassHeader, " \t:") {
		return fmt.Errorf("bypass_header must be a header name, got %q", h.BypassHeader)
	}
	if h.LedgerRetention < 0 {
		return fmt.Errorf("ledger_retention must be positive, got %s", time.Duration(h.LedgerRetention))
	}
	if h.LedgerMaxRecords != nil && *h.LedgerMaxRecords < 1 {
		return fmt.Errorf("ledger_max_records must be positive, got %d", *h.LedgerMaxRecords)
	}
	if h.LedgerMaxBytes != nil && *h.LedgerMaxBytes < 1 {
		return fmt.Errorf("ledger_max_bytes must be positive, got %d", *h.LedgerMaxBytes)
	}
	for id, name := range h.TenantLabels {
		if len(id) != tenantIDLen || strings.Trim(id, "0123456789abcdef") != "" {
			return fmt.Errorf("tenant_label must name a tenant id, the %d lower-case hex digits of the ledger's tenant field, got %q", tenantIDLen, id)
		}
		if name == "" {
			return fmt.Errorf("tenant_label %s has an empty name", id)
		}
	}
	return nil
}

// unmarshalTenantLabel reads `tenant_label <tenant-id> <name>`.
func (t *Handler) unmarshalTenantLabel(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) != 2 {
		return d.Errf("tenant_label takes a tenant id and a name, got %d arguments", len(args))
	}
	if t.TenantLabels == nil {
		t.TenantLabels = map[string]string{}
	}
	if _, dup := t.TenantLabels[args[0]]; dup {
		return d.Errf("duplicate tenant_label '%s'", args[0])
	}
	t.TenantLabels[args[0]] = args[1]
	return nil
}
