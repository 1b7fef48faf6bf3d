// Package caddymodule plugs Token Terminator into Caddy: the HTTP handler
// http.handlers.token_terminator (Caddyfile directive token_terminator), the
// token_terminator App that owns the state handlers share across reloads,
// and the vault backend modules (token_terminator.vaults.*).
//
// This package is the Caddy-facing adapter only: module registration, the
// configuration (config.go, caddyfile.go), provisioning and the App that
// owns state across reloads. Each request goes to the request runtime,
// internal/gateway, which decides whether it is a candidate, reads and
// compiles its body and watches the provider's answer; every decision
// about the content belongs to the compiler (internal/compiler).
package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/gateway"
	"github.com/tokenterminator/caddy-token-terminator/internal/tokens"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/memvault"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// handlerState is what Provision gives a handler.
type handlerState struct {
	logger   *zap.Logger
	gw       *gateway.Gateway // the request runtime (internal/gateway)
	releases []func()
	// warmedUp receives the warm-up's result (warmUp); nil when none ran.
	warmedUp chan bool
}

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
	h.gw = h.newGateway(app)
	if h.Mode == string(compiler.ModeOff) {
		return nil // nothing is ever compiled: open nothing
	}
	wr, err := h.wire(ctx, app)
	if err != nil {
		return err
	}
	// A reload: the vault a previous config has open is shared now, so the
	// new handler is ready before its config serves. Its limits change
	// when the config starts.
	if ov, release, ok, err := app.vault(wr.backend, *h.MaxBodySize, true); err != nil {
		return err
	} else if ok {
		if err := h.attach(wr, ov, release); err != nil {
			return err
		}
		app.onStart(func() error {
			h.logStart(wr.backend)
			return app.setLimits(ov, wr.backend)
		})
		return nil
	}
	// Otherwise the vault opens when the config starts, never while it is
	// only validated; a request before that waits for it.
	if err := wr.backend.CheckVault(h.logger); err != nil {
		return err
	}
	opened := make(chan struct{})
	h.gw.Opened = opened
	app.onStart(func() error {
		defer close(opened)
		return h.startVault(wr)
	})
	return nil
}

// newGateway is the handler's request runtime, configured from the
// handler's settings (defaults applied); the parts that need the vault
// are attached when it opens.
func (h *Handler) newGateway(app *App) *gateway.Gateway {
	gw := gateway.New(gateway.Config{
		Mode:                  compiler.Mode(h.Mode),
		MaxBodySize:           *h.MaxBodySize,
		MaxBufferedBytes:      *h.MaxBufferedBytes,
		MaxConcurrentCompiles: *h.MaxConcurrentCompiles,
		CompileTimeout:        time.Duration(h.CompileTimeout),
		BodyReadTimeout:       time.Duration(h.BodyReadTimeout),
		BypassHeader:          h.BypassHeader,
		Tenant:                h.Tenant,
		Session:               h.Session,
		TenantLabels:          h.TenantLabels,
		Encrypt:               h.Encrypt == nil || *h.Encrypt,
	}, h.logger)
	if cfg, err := h.costConfig(); err == nil { // checked by Validate
		gw.Prices = &cfg
	}
	gw.PriceOf = h.priceOf
	gw.Holdout = h.holdoutRuntime()
	if app != nil {
		gw.Stats = app.Stats()
		gw.Metrics = app.shared.metrics
	}
	return gw
}

// wiring is what a handler's vault, once open, is attached with.
type wiring struct {
	app         *App
	backend     VaultBackend
	tcfg        tokens.Config
	counter     compiler.TokenCounter
	operatorKey []byte // tenant_key resolved; nil: the vault's own key
}

// wire claims the handler's vault and gets its token counter; nothing is
// opened yet.
func (h *Handler) wire(ctx caddy.Context, app *App) (*wiring, error) {
	backend, err := h.vaultModule(ctx)
	if err != nil {
		return nil, err
	}
	if err := app.claim(backend); err != nil {
		return nil, err // the operator fixes this in the config
	}
	wr := &wiring{app: app, backend: backend, tcfg: tokensConfig(h)}
	if h.TenantKey != "" {
		if wr.operatorKey, err = h.resolveTenantKey(nil); err != nil {
			return nil, err
		}
	}
	h.warnClientIdentity()
	// The compiler's options are checked now: the compiler itself needs
	// the vault, which opens only when the config starts.
	if _, err := compiler.New(h.compilerOptions(), checkOnlyStore{}, nil); err != nil {
		return nil, err
	}
	counter, release, err := app.counter(wr.tcfg)
	if err != nil {
		return nil, fmt.Errorf("tokenizer '%s': %v", h.Tokenizer, err)
	}
	h.releases = append(h.releases, release)
	wr.counter = counter
	return wr, nil
}

// attach gives the gateway what needs the open vault: its ledger, the
// verified set, the tenant key, recovery and the compiler.
func (h *Handler) attach(wr *wiring, ov *openVault, release func()) error {
	gw := h.gw
	h.releases = append(h.releases, release)
	gw.Ledger = ov.startLedger(h.ledgerLimits(), gw.Metrics, h.logger.Named("ledger"))
	gw.Gate = gateway.NewTenantGate(ov.backend, *h.MaxNewTenantsPerMinute, h.logger)
	if wr.operatorKey == nil {
		gw.Tenants, gw.TenantKeyPending = h.backendTenants(ov, wr.backend.VaultKey())
		gw.SealKey = cachedKey(ov)
	} else {
		gw.Tenants = gateway.TenantHasher(wr.operatorKey)
		key := wr.operatorKey
		gw.SealKey = func() []byte { return key }
	}
	gw.EnableRecovery(h.Recovery, h.recoveryConfig(), ov.backend)
	comp, release, err := wr.app.compiler(wr.backend.VaultKey(), counterKey(wr.tcfg), h.compilerOptions(), ov.backend, wr.counter)
	if err != nil {
		return err
	}
	h.releases = append(h.releases, release)
	gw.Compile = comp.Compile
	gw.Observe = comp.ObserveUsage
	return nil
}

// startVault opens the handler's vault as its config starts and attaches
// it. A vault that does not open leaves candidates passing through
// (vault_error), unless require_vault refuses the config.
func (h *Handler) startVault(wr *wiring) error {
	app, backend := wr.app, wr.backend
	ov, release, _, err := app.vault(backend, *h.MaxBodySize, false)
	if err == nil {
		err = h.attach(wr, ov, release)
		if err == nil {
			err = app.setLimits(ov, backend)
		}
		if err == nil {
			h.warmUp(wr)
		}
	}
	if cfgErr := (errVaultConfig{}); errors.As(err, &cfgErr) || errors.As(err, new(errVaultRefused)) {
		return err // the operator fixes this in the config
	}
	if err != nil {
		if h.RequireVault != nil && *h.RequireVault {
			return fmt.Errorf("vault %s did not open and require_vault is on: %w", backend.VaultKey(), err)
		}
		h.gw.VaultErr = "vault did not open: " + err.Error()
		h.logger.Error("vault did not open; candidates pass through (passthrough=vault_error) until a reload opens it; its files are left as they are",
			zap.String("vault", backend.VaultKey()), zap.Error(err))
	}
	h.logStart(backend)
	return nil
}

// warmUp has the gateway pay a fresh process's first-use costs in the
// background (gateway.WarmUp), once the vault this start opened is
// attached: with a compiler of the handler's options and token counter over
// an in-memory store that is dropped afterwards, so the vault is never
// touched. Cleanup stops it. A reload shares an open vault in a process
// that is warm already, so it runs none.
func (h *Handler) warmUp(wr *wiring) {
	comp, err := compiler.New(h.compilerOptions(), memvault.New(), wr.counter)
	if err != nil {
		return // checked in wire; a warm-up is never worth an error
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.releases = append(h.releases, cancel)
	h.warmedUp = make(chan bool, 1)
	go func(gw *gateway.Gateway, done chan<- bool) { done <- gw.WarmUp(ctx, comp.Compile) }(h.gw, h.warmedUp)
}

// checkOnlyStore lets compiler.New check the options before the vault
// opens; the compiler it returns is never used.
type checkOnlyStore struct{ artifact.Store }

// logStart writes the handler's start-up line: its mode, vault, recovery,
// compaction and whether it needs its vault.
func (h *Handler) logStart(backend VaultBackend) {
	fields := []zap.Field{zap.String("mode", h.Mode), zap.String("vault", backend.VaultKey()),
		zap.Bool("vault_open", h.gw.VaultErr == ""), zap.String("recovery", h.Recovery),
		zap.Bool("context_compaction", *h.ContextCompaction), zap.Bool("require_vault", h.RequireVault != nil && *h.RequireVault)}
	if h.gw.Recovery == nil && h.Recovery != RecoveryOff {
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

// ServeHTTP hands every request to the gateway, with next as its next
// handler (a handler that was never provisioned only passes requests on).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if h.gw == nil {
		return next.ServeHTTP(w, r)
	}
	return h.gw.ServeHTTP(w, r, next.ServeHTTP)
}

// Interface guards
var (
	_ caddy.Module                = (*Handler)(nil)
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
