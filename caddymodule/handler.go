// Package caddymodule plugs Token Terminator into Caddy: the HTTP handler
// http.handlers.token_terminator (Caddyfile directive token_terminator), the
// token_terminator App that owns the state handlers share across reloads,
// and the vault backend modules (token_terminator.vaults.*).
//
// The handler is deliberately thin: it decides only whether a request is a
// candidate (by method and path, through compiler.FormatFor), buffers the
// body within max_body_size, hands it to the compiler, forwards whatever the
// compiler says must be forwarded, and watches the provider's answer: the
// request's lineage is committed only when the provider accepted it. Every
// decision about the content belongs to the compiler.
package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
	"github.com/tokenterminator/caddy-token-terminator/internal/tokens"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// handlerState is what Provision gives a handler; tests set it directly.
type handlerState struct {
	logger    *zap.Logger
	comp      compileFunc
	observe   func(compiler.Result, response.Usage) // the compiler's usage calibration; nil in tests
	tenants   tenantFunc
	formatFor func(method, path string) (string, bool)
	buffered  *atomic.Int64 // bytes of bodies held now
	reading   *atomic.Int64 // of them, bodies being read (admission.go)
	slots     compileSlots  // max_concurrent_compiles (admission.go)
	stats     *Stats        // the App's counters
	metrics   *metrics      // the App's Prometheus series (metrics.go)
	ledger    *ledgerWriter // the vault's request ledger, nil without one (ledger.go)
	// vaultErr is set when the vault failed to open: candidates then pass
	// through with passthrough=vault_error and this detail.
	vaultErr string
	// opened is made by Provision on a first start (nil on a reload) and
	// closed once the config's Start has opened the vault and set the
	// fields above. Caddy starts its apps in no fixed order, so the HTTP
	// server may serve before the vault is open: a request meanwhile waits
	// for it, at most compile_timeout, then passes on untouched.
	opened chan struct{}
	// tenantKeyPending reports that the vault's own tenant key could not
	// be read yet (nil: it was read); see backendTenants.
	tenantKeyPending func() bool
	releases         []func()
	// recovery is nil when recovery is off (recovery.go).
	recovery *recoveryRuntime
	// gate holds tenants to the vault's verified set (verified.go); nil
	// only in tests that build a handler without provisioning it.
	gate   *tenantGate
	prices *cost.Config // the cost configuration, for pricing the provider's usage (ledger.go)
}

// compileFunc and tenantFunc are the handler's only dependencies on the
// compiler and the tenant key; tests replace them.
type (
	compileFunc func(ctx context.Context, req compiler.Request) compiler.Result
	tenantFunc  func(identity string) string
)

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.token_terminator",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision sets defaults, checks the values and gets the vault, the token
// counter and the compiler from the App. A vault that fails to open does
// not stop Caddy: the handler passes candidates through until a reload
// opens it.
func (h *Handler) Provision(ctx caddy.Context) error {
	appv, err := ctx.App(AppName)
	if err != nil {
		return err
	}
	return h.provision(ctx, appv.(*App))
}

func (h *Handler) provision(ctx caddy.Context, app *App) error {
	h.logger = ctx.Logger()
	if err := h.Validate(); err != nil {
		return err
	}
	h.applyDefaults()
	if cfg, err := h.costConfig(); err == nil { // checked by Validate
		h.prices = &cfg
	}
	h.formatFor = compiler.FormatFor
	h.buffered = new(atomic.Int64)
	h.reading = new(atomic.Int64)
	h.slots = newCompileSlots(*h.MaxConcurrentCompiles)
	h.stats = app.Stats()
	h.metrics = app.shared.metrics
	if h.Mode == string(compiler.ModeOff) {
		return nil // nothing is ever compiled: open nothing
	}

	backend, err := h.vaultModule(ctx)
	if err != nil {
		return err
	}
	if err := app.claim(backend); err != nil {
		return err // the operator fixes this in the config
	}
	var operatorKey []byte
	if h.TenantKey != "" {
		if operatorKey, err = h.resolveTenantKey(nil); err != nil {
			return err
		}
	}
	h.warnClientIdentity()
	// The compiler's options are checked now: the compiler itself needs
	// the vault, which opens only when the config starts.
	if _, err := compiler.New(h.compilerOptions(), checkOnlyStore{}, nil); err != nil {
		return err
	}
	tcfg := tokensConfig(h)
	counter, release, err := app.counter(tcfg)
	if err != nil {
		return fmt.Errorf("tokenizer '%s': %v", h.Tokenizer, err)
	}
	h.releases = append(h.releases, release)

	attach := func(ov *openVault, release func()) error {
		h.releases = append(h.releases, release)
		h.ledger = ov.startLedger(h.ledgerLimits(), h.metrics, h.logger.Named("ledger"))
		h.gate = newTenantGate(ov.backend, *h.MaxNewTenantsPerMinute, h.logger)
		if operatorKey == nil {
			h.tenants, h.tenantKeyPending = h.backendTenants(ov, backend.VaultKey())
		} else {
			h.tenants = tenantHasher(operatorKey)
		}
		h.provisionRecovery(ov.backend)
		comp, release, err := app.compiler(backend.VaultKey(), counterKey(tcfg), h.compilerOptions(), ov.backend, counter)
		if err != nil {
			return err
		}
		h.releases = append(h.releases, release)
		h.comp = comp.Compile
		h.observe = comp.ObserveUsage
		return nil
	}
	// A reload: the vault a previous config has open is shared now, so the
	// new handler is ready before its config serves. Its limits change
	// when the config starts.
	if ov, release, ok, err := app.vault(backend, *h.MaxBodySize, true); err != nil {
		return err
	} else if ok {
		if err := attach(ov, release); err != nil {
			return err
		}
		app.onStart(func() error {
			h.logStart(backend)
			return app.setLimits(ov, backend)
		})
		return nil
	}
	// Otherwise the vault opens when the config starts, never while it is
	// only validated; a request before that waits for it (awaitOpen).
	if err := backend.CheckVault(h.logger); err != nil {
		return err
	}
	opened := make(chan struct{})
	h.opened = opened
	app.onStart(func() error {
		defer close(opened)
		ov, release, _, err := app.vault(backend, *h.MaxBodySize, false)
		if err == nil {
			err = attach(ov, release)
			if err == nil {
				err = app.setLimits(ov, backend)
			}
		}
		if cfgErr := (errVaultConfig{}); errors.As(err, &cfgErr) || errors.As(err, new(errVaultRefused)) {
			return err // the operator fixes this in the config
		}
		if err != nil {
			if h.RequireVault != nil && *h.RequireVault {
				return fmt.Errorf("vault %s did not open and require_vault is on: %w", backend.VaultKey(), err)
			}
			h.vaultErr = "vault did not open: " + err.Error()
			h.logger.Error("vault did not open; candidates pass through (passthrough=vault_error) until a reload opens it; its files are left as they are",
				zap.String("vault", backend.VaultKey()), zap.Error(err))
		}
		h.logStart(backend)
		return nil
	})
	return nil
}

// checkOnlyStore lets compiler.New check the options before the vault
// opens; the compiler it returns is never used.
type checkOnlyStore struct{ compiler.Store }

// logStart writes the handler's start-up line: its mode, vault, recovery,
// compaction and whether it needs its vault.
func (h *Handler) logStart(backend VaultBackend) {
	fields := []zap.Field{zap.String("mode", h.Mode), zap.String("vault", backend.VaultKey()),
		zap.Bool("vault_open", h.vaultErr == ""), zap.String("recovery", h.Recovery),
		zap.Bool("context_compaction", *h.ContextCompaction), zap.Bool("require_vault", h.RequireVault != nil && *h.RequireVault)}
	if h.recovery == nil && h.Recovery != RecoveryOff {
		fields = append(fields, zap.String("recovery_effective", RecoveryOff))
	}
	h.logger.Info("token_terminator handler ready", fields...)
}

func tokensConfig(h *Handler) tokens.Config {
	return tokens.Config{Tokenizer: h.Tokenizer, Budget: time.Duration(h.TokenBudget), CacheBytes: *h.TokenCacheSize}
}

// vaultModule loads the configured vault backend module, or the badger
// vault the shorthand (or nothing) names.
func (h *Handler) vaultModule(ctx caddy.Context) (VaultBackend, error) {
	if h.VaultRaw != nil {
		m, err := ctx.LoadModule(h, "VaultRaw")
		if err != nil {
			return nil, fmt.Errorf("vault: %v", err)
		}
		vb, ok := m.(VaultBackend)
		if !ok {
			return nil, fmt.Errorf("vault: module %T is not a vault backend", m)
		}
		return vb, nil
	}
	b := &BadgerVault{Dir: h.VaultDir, MaxBytes: h.VaultMaxBytes}
	if err := b.Provision(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// Cleanup releases this handler's shares of the compiler, counter and
// vault (in that order); the last user closes them. Caddy provisions a new
// config before it cleans up the old one, so a reload keeps them open.
func (h *Handler) Cleanup() error {
	for i := len(h.releases) - 1; i >= 0; i-- {
		h.releases[i]()
	}
	h.releases = nil
	return nil
}

// isOpen reports whether the config's Start has opened the vault (always
// on a reload, which shares the open one).
func (h *Handler) isOpen() bool {
	if h.opened == nil {
		return true
	}
	select {
	case <-h.opened:
		return true
	default:
		return false
	}
}

// awaitOpen waits, at most compile_timeout, for the config's Start to open
// the vault; false when it is still opening.
func (h *Handler) awaitOpen(r *http.Request) bool {
	if h.isOpen() {
		return true
	}
	t := time.NewTimer(time.Duration(h.CompileTimeout))
	defer t.Stop()
	select {
	case <-h.opened:
		return true
	case <-t.C:
	case <-r.Context().Done():
	}
	return h.isOpen()
}

// ServeHTTP compiles candidate requests and passes everything on to next.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if !h.awaitOpen(r) || h.Mode == string(compiler.ModeOff) || (h.comp == nil && h.vaultErr == "") {
		return next.ServeHTTP(w, r)
	}
	if h.serveRecoveryAPI(w, r) {
		return nil
	}
	format, ok := h.formatFor(r.Method, r.URL.Path)
	if !ok {
		if r.Method == http.MethodGet && isWebSocket(r.Header) {
			if ww, ok := h.webSocket(w, r); ok { // websocket.go
				return next.ServeHTTP(ww, r)
			}
			h.upgrade(r)
		}
		return next.ServeHTTP(w, r)
	}
	ex := &exchange{start: time.Now(), rep: report{format: format, path: r.URL.Path, rawBytes: r.ContentLength, sentBytes: r.ContentLength}}
	if h.bypassed(r) {
		ex.rep.passthrough(compiler.ReasonBypass)
		if h.tenants != nil && h.vaultErr == "" {
			if t := h.tenant(r, format); t != "" {
				// For the ledger's per-tenant figures: a verified tenant only.
				if ok, _, _ := h.verifiedTenant(r, ex, t); ok {
					ex.rep.tenant = t
				}
			}
		}
		return h.forward(w, r, next, ex)
	}
	release := h.prepare(r, ex)
	defer release()
	return h.forward(w, r, next, ex)
}

// exchange is one candidate request on its way through the handler.
type exchange struct {
	start  time.Time
	rep    report
	commit func()            // lineage record, run once the provider accepted the body
	body   *bodyBuffer       // the client's body read whole (bodybuf.go); nil when not read
	rec    *recoveryExchange // set when the forwarded body carries the recovery tool
	held   *heldBytes        // the recovery loop's buffers in max_buffered_bytes (recovery.go)
	// observe hands the provider's usage for this request to the compiler
	// (cost calibration); nil when the request was not compiled.
	observe  func(response.Usage)
	observed bool        // observe was called
	obs      observation // what metrics and the ledger note (ledger.go)
	// The request's tenant as the verified set saw it (verified.go), for
	// the provider's answer to settle; tenant is "" without one.
	gate struct {
		tenant   string
		verified bool
		reason   compiler.Reason
	}
}

// verifiedTenant reports whether tenant may use vault state, and notes it
// in ex for the answer to verify or revoke. Without a gate (a handler
// built in a test without provisioning) every tenant may.
func (h *Handler) verifiedTenant(r *http.Request, ex *exchange, tenant string) (bool, compiler.Reason, string) {
	if h.gate == nil {
		return true, "", ""
	}
	ok, reason, detail := h.gate.check(r.Context(), tenant)
	ex.gate.tenant, ex.gate.verified, ex.gate.reason = tenant, ok, reason
	return ok, reason, detail
}

// prepare reads the body, compiles it and sets what goes upstream. It
// returns the release of the body's share of max_buffered_bytes, due when
// the upstream is done with the body.
func (h *Handler) prepare(r *http.Request, ex *exchange) (release func()) {
	rep := &ex.rep
	if reason, ok := h.refuseUnread(r); !ok {
		rep.passthrough(reason)
		return func() {}
	}
	// Known before the body is read: a candidate without a vault or a
	// tenant is only forwarded, and its body reserves no working memory.
	tenant := ""
	if h.vaultErr == "" {
		tenant = h.tenant(r, rep.format) // the tenant hasher exists only with a vault
	}
	// A tenant the provider has not accepted yet gets no state: its
	// request is only forwarded, and the answer may verify it.
	var unverified compiler.Reason
	var unverifiedDetail string
	if tenant != "" {
		if ok, why, detail := h.verifiedTenant(r, ex, tenant); !ok {
			tenant, unverified, unverifiedDetail = "", why, detail
		}
	}
	buf, reason, reserved := h.readBody(r, ex, tenant != "")
	release = reserved.release
	if o := ex.body; o != nil {
		release = func() { reserved.release(); o.release() } // the handler's own reference
	}
	if reason != "" {
		reserved.endWork()
		rep.passthrough(reason)
		return release
	}
	// wire is the body as the client sent it (encoded, if it was);
	// buf becomes the decoded body the compiler reads (encoding.go).
	wire := buf
	// passOn forwards the body as read, uncompiled, for reason.
	passOn := func(reason compiler.Reason, detail string) func() {
		reserved.endWork()
		rep.passthrough(reason)
		rep.detail = detail
		rep.rawBytes, rep.sentBytes = int64(len(wire)), int64(len(wire))
		setBody(r, ex.body, wire)
		return release
	}
	if h.vaultErr != "" {
		return passOn(compiler.ReasonVaultError, h.vaultErr)
	}
	if unverified != "" {
		return passOn(unverified, unverifiedDetail)
	}
	if tenant == "" {
		// No credential and no configured identity: no cross-request state.
		if h.tenantKeyPending != nil && h.tenantKeyPending() {
			return passOn(compiler.ReasonVaultError, "the vault's tenant key is not readable yet")
		}
		return passOn(compiler.ReasonNoTenant, "")
	}
	coding, _ := requestCoding(r) // refuseUnread let only a known one through
	if coding != "" {
		dec, err := decodeBody(coding, wire, *h.MaxBodySize)
		if err != nil {
			return passOn(compiler.ReasonContentEncoding, err.Error())
		}
		buf = dec
	}
	// The body is whole: its compile's working memory is reserved now,
	// before the wait for a slot (admission.go).
	if !reserved.admitWork(len(buf)) {
		return passOn(compiler.ReasonBusy, "no room in max_buffered_bytes for the compile's working memory")
	}

	mode := compiler.Mode(h.Mode)
	req := compiler.Request{
		Path:        r.URL.Path,
		Body:        buf,
		Scope:       compiler.Scope{Tenant: tenant, Session: h.session(r)},
		Mode:        mode,
		DeferCommit: true,
		Scratch:     ex.body.scratch(),
	}
	// compile_timeout bounds the wait for a slot and the compile together.
	// A waiting request holds its body and the reservation of its compile's
	// working memory (admission.go), so the slot, when it comes, is used.
	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(h.CompileTimeout))
	defer cancel()
	queued := time.Now()
	slot, ok := h.slots.acquire(ctx)
	rep.queue = time.Since(queued)
	if !ok {
		if r.Context().Err() != nil {
			return passOn(compiler.ReasonClientAbort, "")
		}
		return passOn(compiler.ReasonBusy, "no compile slot within compile_timeout")
	}
	// The slot, the working memory's reservation and the compile's hold on
	// the body are returned when the compile stops, not when it returns: one abandoned
	// at compile_timeout keeps working (reading the body, holding its
	// memory) in the background until it finishes.
	compiling, _ := ex.body.tryHold() // the handler holds it: always ok
	stopped := sync.OnceFunc(func() { ex.body.holdScratch(h.buffered); reserved.endWork(); compiling(); slot() })
	req.Done = stopped
	req.Hold = ex.body.tryHold // the token counter's work past its budget reads the body under it
	res := h.compile(ctx, req)
	out := buf
	if mode == compiler.ModeEnforce && res.Decision == compiler.Accepted && res.Body != nil {
		out = res.Body
		body := release
		rewrite := h.holdRewrite(len(out))
		release = func() { rewrite(); body() }
	}
	if res.Reason != compiler.ReasonTimeout {
		stopped() // stopped (a compile that panicked may not have said so)
	}
	if res.Reason == compiler.ReasonTimeout && r.Context().Err() != nil {
		res.Reason = compiler.ReasonClientAbort // the client left; the compile was not slow
	}

	sent := out
	if coding != "" {
		sent, out, res = encodeRewrite(coding, wire, buf, out, res, mode)
	}
	setBody(r, ex.body, sent)
	ex.commit = res.Commit
	h.noteRecovery(r, ex, res, buf, out, tenant)
	if h.observe != nil {
		ex.observe = func(u response.Usage) { h.observe(res, u) }
	}

	rep.fromResult(res, int64(len(wire)), int64(len(sent)), mode)
	ex.obs.note(res, h.conversationID(tenant, res.Conversation))
	if res.Reason == compiler.ReasonInvalidOutput && h.stats != nil {
		rep.invalidTotal = h.stats.InvalidOutputs.Add(1)
	}
	rep.tenant = tenant
	return release
}

// compile runs the compiler under the compile timeout and turns a panic into
// a pass-through of the original body.
func (h *Handler) compile(parent context.Context, req compiler.Request) (res compiler.Result) {
	ctx, cancel := context.WithTimeout(parent, time.Duration(h.CompileTimeout))
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			// Never log the panic value itself: it could quote content.
			fields := []zap.Field{zap.String("panic_type", fmt.Sprintf("%T", v)), zap.Stack("stack")}
			if re, ok := v.(runtime.Error); ok {
				fields = append(fields, zap.String("runtime_error", re.Error()))
			}
			h.logger.Error("compiler panic; forwarding the original request", fields...)
			res = compiler.Result{
				Body:      req.Body,
				Decision:  compiler.Passthrough,
				Reason:    compiler.ReasonPanic,
				RawBytes:  len(req.Body),
				SentBytes: len(req.Body),
			}
		}
	}()
	return h.comp(ctx, req)
}

// isWebSocket reports a WebSocket upgrade request. The canonical key is
// looked up directly: this runs for every GET the handler sees.
func isWebSocket(h http.Header) bool {
	v := h["Upgrade"]
	return len(v) > 0 && strings.EqualFold(v[0], "websocket")
}

// upgrade reports a protocol upgrade (Codex's WebSocket transport of
// /v1/responses) on a provider path: it passes through uncompiled.
func (h *Handler) upgrade(r *http.Request) {
	format, ok := h.formatFor(http.MethodPost, r.URL.Path)
	if !ok {
		return
	}
	if h.stats != nil {
		h.stats.WebSocketUpgrades.Add(1)
	}
	if h.metrics != nil {
		h.metrics.upgrades.WithLabelValues(format).Inc()
	}
	h.logger.Info("upgrade passed through uncompiled",
		zap.String("format", format), zap.String("path", r.URL.Path), zap.Bool("websocket", true))
}

// Interface guards
var (
	_ caddy.Module                = (*Handler)(nil)
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
