package caddymodule

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

func init() {
	caddy.RegisterModule(AdminAPI{})
}

// AdminAPI serves what the gateway saved on Caddy's admin API
// (admin.api.token_terminator; Caddy loads every admin.api module):
//
//	GET /token-terminator/                      the savings page
//	GET /token-terminator/stats?since=&until=   totals, per tenant, model family, day
//	GET /token-terminator/ledger?limit=&before= ledger records, newest first
//
// since, until and before are RFC 3339 times or unix milliseconds. It reads
// the ledgers of the vaults the loaded configs have open; nothing it
// serves holds content, credentials or raw model names.
type AdminAPI struct{}

// CaddyModule returns the Caddy module information.
func (AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.token_terminator",
		New: func() caddy.Module { return new(AdminAPI) },
	}
}

// AdminPath is where the admin API serves the savings page and its data.
const AdminPath = "/token-terminator/"

// Routes implements caddy.AdminRouter.
func (a *AdminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: AdminPath, Handler: caddy.AdminHandlerFunc(a.serve)}}
}

//go:embed savings.html
var savingsPage []byte

// Admin query bounds.
const (
	defaultLedgerLimit = 100
	maxLedgerLimit     = 10000
	topConversations   = 10
)

func (a *AdminAPI) serve(w http.ResponseWriter, r *http.Request) error {
	switch r.URL.Path {
	case AdminPath:
		return serveSavings(w, r, savingsPageView)
	case AdminPath + "stats":
		return serveSavings(w, r, savingsStatsView)
	case AdminPath + "ledger":
		return serveSavings(w, r, savingsLedgerView)
	}
	return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("no such resource: %s", r.URL.Path)}
}

// savingsView is one of the three things the savings endpoints serve.
type savingsView int

const (
	savingsPageView savingsView = iota
	savingsStatsView
	savingsLedgerView
)

// serveSavings serves the page, the stats or the ledger, for the admin
// API and for the savings HTTP handler alike. Errors are caddy.APIError
// with the status to answer.
func serveSavings(w http.ResponseWriter, r *http.Request, view savingsView) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed", r.Method)}
	}
	switch view {
	case savingsPageView:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
		_, err := w.Write(savingsPage)
		return err
	case savingsStatsView:
		since, err := timeParam(r, "since")
		if err != nil {
			return err
		}
		until, err := timeParam(r, "until")
		if err != nil {
			return err
		}
		recs, err := readLedgers(r.Context(), vault.LedgerQuery{Since: since, Until: until})
		if err != nil {
			return caddy.APIError{HTTPStatus: http.StatusInternalServerError, Err: err}
		}
		st := summarize(recs)
		st.Since, st.Until = since, until
		st.Vault = vaultUsage()
		return writeJSON(w, st)
	default:
		before, err := timeParam(r, "before")
		if err != nil {
			return err
		}
		limit := defaultLedgerLimit
		if v := r.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxLedgerLimit {
				return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf("limit must be 1 to %d, got %q", maxLedgerLimit, v)}
			}
			limit = n
		}
		recs, err := readLedgers(r.Context(), vault.LedgerQuery{Until: before, Limit: limit})
		if err != nil {
			return caddy.APIError{HTTPStatus: http.StatusInternalServerError, Err: err}
		}
		if recs == nil {
			recs = []vault.LedgerRecord{}
		}
		return writeJSON(w, map[string]any{"records": recs})
	}
}

func writeJSON(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(v)
}

// timeParam reads an RFC 3339 time or unix milliseconds; 0 when absent.
func timeParam(r *http.Request, name string) (int64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms >= 0 {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return 0, caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf("%s must be an RFC 3339 time or unix milliseconds, got %q", name, v)}
	}
	return t.UnixMilli(), nil
}

// openVaults calls f for every vault the loaded configs have open.
func openVaults(f func(*openVault)) {
	owners.Range(func(_, v any) bool {
		v.(*shared).vaults.Range(func(_, ov any) bool {
			f(ov.(*openVault))
			return true
		})
		return true
	})
}

// readLedgers flushes and reads the ledger of every open vault, newest
// first across them.
func readLedgers(ctx context.Context, q vault.LedgerQuery) ([]vault.LedgerRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out []vault.LedgerRecord
	var firstErr error
	openVaults(func(ov *openVault) {
		l := ov.ledger.Load()
		if l == nil {
			return
		}
		l.Flush(ctx)
		recs, err := ov.backend.(vault.Ledger).ReadLedger(ctx, q) // a writer runs only for a backend with a ledger
		if err != nil && firstErr == nil {
			firstErr = err
		}
		out = append(out, recs...)
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time > out[j].Time })
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, firstErr
}

// vaultUsage sums the open vaults' sizes (backends that keep Stats).
func vaultUsage() *vaultSummary {
	var sum vaultSummary
	any := false
	openVaults(func(ov *openVault) {
		if s, ok := ov.backend.(vaultStatser); ok {
			st := s.Stats()
			any = true
			sum.Artifacts += st.Artifacts
			sum.Bytes += st.Bytes
			sum.MaxBytes += st.MaxBytes
			sum.Evicted += st.Evicted
		}
	})
	if !any {
		return nil
	}
	return &sum
}

type vaultSummary struct {
	Artifacts int64  `json:"artifacts"`
	Bytes     int64  `json:"bytes"`
	MaxBytes  int64  `json:"max_bytes"`
	Evicted   uint64 `json:"evicted"`
}
