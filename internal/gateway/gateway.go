// Package gateway is Token Terminator's per-request runtime: it reads a
// candidate's body within the memory and time bounds, admits it to a
// compile slot, holds its tenant to the verified set, hands the body to
// the compiler, forwards what the compiler says must be forwarded to the
// next handler, watches the provider's answer (committing the lineage only
// when the provider accepted the request), runs the recovery loop, and
// records one outcome per request that the response header, the log line,
// the metrics and the ledger all read.
//
// It knows nothing of Caddy's module system: caddymodule configures a
// Gateway and calls ServeHTTP with the next handler as a plain function.
// Following a request: ServeHTTP (this file) hands a candidate to prepare
// (flow.go: body.go, admission.go, verified.go, compile.go) and then to
// forward (response.go), which exchanges it with the next handler (through
// the recovery loop, recovery.go, when the body carries the tool) and
// finalizes the outcome (outcome.go, account.go).
package gateway

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// HeaderName is the response header reporting the decision for every
// candidate request.
const HeaderName = "Token-Terminator"

// Next is the handler after the gateway. An http.Handler adapts with
// HandlerNext; Caddy's next handler is passed as its ServeHTTP method, so
// that its error reaches Caddy's error handling unchanged.
type Next func(http.ResponseWriter, *http.Request) error

// HandlerNext adapts a plain http.Handler, which reports no error.
func HandlerNext(h http.Handler) Next {
	return func(w http.ResponseWriter, r *http.Request) error { h.ServeHTTP(w, r); return nil }
}

// Config is the gateway's part of the handler's configuration, defaults
// applied and validated by the caller.
type Config struct {
	Mode                  compiler.Mode
	MaxBodySize           int64
	MaxBufferedBytes      int64
	MaxConcurrentCompiles int
	CompileTimeout        time.Duration
	BodyReadTimeout       time.Duration
	BypassHeader          string
	Tenant                string            // the configured identity placeholder; "" uses the credential
	Session               string            // the session placeholder; "" for none
	TenantLabels          map[string]string // tenant id -> the operator's label
	// Encrypt seals vaulted content under keys derived from the request's
	// secret and the tenant key (seal.go); it takes effect once SealKey is
	// set.
	Encrypt bool
}

// Gateway is one handler's runtime. Caddy's provisioning sets its fields
// once; the ones that need the vault are set when the config starts,
// before Opened is closed.
type Gateway struct {
	Config

	Logger  *zap.Logger
	Compile CompileFunc                           // the compiler; nil until the vault is open
	Observe func(compiler.Result, provider.Usage) // the compiler's usage calibration; may be nil
	Tenants TenantFunc                            // keyed hash of an identity
	// SealKey returns the tenant key data keys derive from, nil while it
	// is not readable yet (seal.go); nil when there is no vault.
	SealKey   func() []byte
	FormatFor func(method, path string) (provider.Format, bool)
	Buffered  *atomic.Int64 // bytes of bodies held now (max_buffered_bytes)
	Reading   *atomic.Int64 // of them, bodies being read (admission.go)
	Slots     CompileSlots  // max_concurrent_compiles (admission.go)
	Stats     *Stats        // the App's running counters
	Metrics   *Metrics      // the App's Prometheus series (metrics.go)
	Ledger    *LedgerWriter // the vault's request ledger, nil without one (ledger.go)
	Prices    *cost.Config  // prices the provider's usage (account.go)
	// PriceOf is the money price of a base input token and its currency,
	// for the ledger's records; nil records none.
	PriceOf func(format provider.Format, model string) (float64, string)
	// VaultErr is set when the vault failed to open: candidates then pass
	// through with passthrough=vault_error and this detail.
	VaultErr string
	// Opened is nil, or a channel closed once the config's Start has
	// opened the vault and set the fields above. Caddy starts its apps in
	// no fixed order, so the server may serve before the vault is open: a
	// request meanwhile waits for it, at most compile_timeout, then passes
	// on untouched.
	Opened chan struct{}
	// TenantKeyPending reports that the vault's own tenant key could not
	// be read yet (nil: it was read).
	TenantKeyPending func() bool
	Recovery         *RecoveryRuntime // nil when recovery is off (recovery.go)
	// Gate holds tenants to the vault's verified set (verified.go); nil
	// only in tests that build a gateway without a vault.
	Gate *TenantGate
	// Holdout assigns conversations to arms and holds the per-label
	// settings (holdout.go); nil: no holdout, no overrides.
	Holdout *Holdout

	// pending orders each tenant's lineage records before its next
	// compiles (pending.go); nil: the process's, which a reload's new
	// gateway shares with the old one still finishing its answers.
	pending *pendingCommits
	// served is set by the first client compile of a body of at least
	// warmUpYieldBytes: the warm-up stops (warmup.go).
	served atomic.Bool
}

// CompileFunc and TenantFunc are the gateway's dependencies on the
// compiler and the tenant key.
type (
	CompileFunc func(ctx context.Context, req compiler.Request) compiler.Result
	TenantFunc  func(identity string) string
)

// Stats are the gateway's running counters that no metric keeps; they
// outlive reloads with the App. They hold no content.
type Stats struct {
	Uncommitted atomic.Uint64 // compiled requests the provider did not accept (no lineage recorded)
}

// New returns a gateway of cfg with its own buffer accounting and compile
// slots; the caller sets the dependencies.
func New(cfg Config, logger *zap.Logger) *Gateway {
	return &Gateway{
		Config:    cfg,
		Logger:    logger,
		FormatFor: compiler.FormatFor,
		Buffered:  new(atomic.Int64),
		Reading:   new(atomic.Int64),
		Slots:     NewCompileSlots(cfg.MaxConcurrentCompiles),
	}
}

// ServeHTTP compiles candidate requests and passes everything on to next.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request, next Next) error {
	if !g.awaitOpen(r) || g.Mode == compiler.ModeOff || (g.Compile == nil && g.VaultErr == "") {
		return next(w, r)
	}
	if g.serveRecoveryAPI(w, r) {
		return nil
	}
	format, ok := g.FormatFor(r.Method, r.URL.Path)
	if !ok {
		if r.Method == http.MethodGet && isWebSocket(r.Header) {
			if ww, ok := g.webSocket(w, r); ok { // websocket.go
				return next(ww, r)
			}
			g.upgrade(r)
		}
		return next(w, r)
	}
	r = g.sealed(r, format) // the tenant's data keys, for the vault (seal.go)
	ex := newExchange(format, r)
	if g.bypassed(r) {
		g.bypass(r, ex)
	} else {
		release := g.prepare(r, ex)
		defer release()
	}
	return g.forward(w, r, next, ex)
}

// isOpen reports whether the config's Start has opened the vault (always
// on a reload, which shares the open one).
func (g *Gateway) isOpen() bool {
	if g.Opened == nil {
		return true
	}
	select {
	case <-g.Opened:
		return true
	default:
		return false
	}
}

// awaitOpen waits, at most compile_timeout, for the config's Start to open
// the vault; false when it is still opening.
func (g *Gateway) awaitOpen(r *http.Request) bool {
	if g.isOpen() {
		return true
	}
	t := time.NewTimer(g.CompileTimeout)
	defer t.Stop()
	select {
	case <-g.Opened:
		return true
	case <-t.C:
	case <-r.Context().Done():
	}
	return g.isOpen()
}

// isWebSocket reports a WebSocket upgrade request. The canonical key is
// looked up directly: this runs for every GET the handler sees.
func isWebSocket(h http.Header) bool {
	v := h["Upgrade"]
	return len(v) > 0 && strings.EqualFold(v[0], "websocket")
}

// upgrade reports a protocol upgrade (Codex's WebSocket transport of
// /v1/responses) on a provider path: it passes through uncompiled.
func (g *Gateway) upgrade(r *http.Request) {
	format, ok := g.FormatFor(http.MethodPost, r.URL.Path)
	if !ok {
		return
	}
	if g.Metrics != nil {
		g.Metrics.upgrades.WithLabelValues(string(format)).Inc()
	}
	g.Logger.Info("upgrade passed through uncompiled",
		zap.String("format", string(format)), zap.String("path", r.URL.Path), zap.Bool("websocket", true))
}
