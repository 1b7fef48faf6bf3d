package caddymodule

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/gateway"
	"github.com/tokenterminator/caddy-token-terminator/internal/tokens"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

func init() {
	caddy.RegisterModule(App{})
}

// AppName is the id of the App; handlers find it with ctx.App(AppName).
const AppName = "token_terminator"

// App is the owner of everything token_terminator handlers share: the open
// vault backends, the token counters, the compilers (with their text
// caches), the tenant keys and the counters. Handlers are thin: they get
// what they need from it in Provision.
//
// Caddy builds a new App for every config it loads, and provisions the new
// config before it cleans up the old one. What must outlive a config (an
// open Badger database can only be opened once; warm caches) lives in one
// process-wide shared value that every App refers to while it is loaded:
// `caddy reload` keeps it, and it goes away only when no config uses it.
// It needs no configuration of its own, so Caddy instantiates it on demand.
type App struct {
	shared *shared
	logger *zap.Logger

	// claims holds the vault configurations named in this config, so two
	// handlers of one config cannot configure one storage two ways.
	mu     *sync.Mutex
	claims map[string]string
	// starts is what this config does when it goes live (Start): open the
	// vaults its handlers name, apply their limits and attach the handlers.
	// Nothing opens a vault before, so `caddy validate`, which provisions
	// a config but never starts it, leaves the vaults alone.
	starts []func() error
	// used names the vaults this config uses, for the start-up lines.
	used []VaultBackend
}

// shared is the state that outlives a config. Each pool is keyed by what
// identifies the resource and counts its users; the last user closes it.
type shared struct {
	vaults    *caddy.UsagePool // VaultBackend.VaultKey -> *openVault
	counters  *caddy.UsagePool // tokens config -> counterHandle
	compilers *caddy.UsagePool // vault key + options -> compilerHandle
	stats     Stats
	metrics   *gateway.Metrics // the gateway's Prometheus series
	// vaultMetrics reports the open vaults' sizes (metrics.go).
	vaultMetrics *vaultCollector
}

func (*shared) Destruct() error { return nil }

// owners hands the shared state from one config's App to the next.
var owners = caddy.NewUsagePool()

const sharedKey = "shared"

// Stats are the gateway's running counters that no metric keeps, kept
// across reloads. They hold no content.
type Stats = gateway.Stats

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  AppName,
		New: func() caddy.Module { return new(App) },
	}
}

// Provision joins (or creates) the shared state.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	a.mu, a.claims = new(sync.Mutex), map[string]string{}
	v, _, err := owners.LoadOrNew(sharedKey, func() (caddy.Destructor, error) {
		sh := &shared{
			vaults:    caddy.NewUsagePool(),
			counters:  caddy.NewUsagePool(),
			compilers: caddy.NewUsagePool(),
		}
		sh.metrics = gateway.NewMetrics()
		sh.vaultMetrics = &vaultCollector{sh: sh}
		return sh, nil
	})
	if err != nil {
		return err
	}
	a.shared = v.(*shared)
	return a.registerMetrics(ctx)
}

// Start implements caddy.App: the config goes live. It opens the vaults
// the handlers name (those a previous config has open are shared), applies
// this config's limits to them and attaches the handlers; a handler whose
// vault does not open passes candidates through, unless it requires the
// vault (require_vault), which refuses to start the config.
func (a *App) Start() error {
	a.mu.Lock()
	starts := a.starts
	a.starts = nil
	a.mu.Unlock()
	for _, f := range starts {
		if err := f(); err != nil {
			return err
		}
	}
	for _, m := range a.used {
		a.logVault(m)
	}
	return nil
}

// onStart adds f to what Start does.
func (a *App) onStart(f func() error) {
	a.mu.Lock()
	a.starts = append(a.starts, f)
	a.mu.Unlock()
}

// logVault writes the start-up line of one vault: backend, location,
// capacity and whether it is open.
func (a *App) logVault(m VaultBackend) {
	fields := append([]zap.Field{zap.String("vault", m.VaultKey())}, m.VaultInfo()...)
	if ov := a.peekVault(m.VaultKey()); ov != nil {
		a.logger.Info("vault open", fields...)
		return
	}
	a.logger.Warn("vault not open; its handlers pass candidates through (passthrough=vault_error)", fields...)
}

// Stop implements caddy.App.
func (a *App) Stop() error { return nil }

// Cleanup releases this config's reference to the shared state.
func (a *App) Cleanup() error {
	if a.shared != nil {
		a.shared = nil
		_, err := owners.Delete(sharedKey)
		return err
	}
	return nil
}

// Stats returns the running counters.
func (a *App) Stats() *Stats { return &a.shared.stats }

// openVault is one open backend and the configuration it was opened with.
type openVault struct {
	backend  vault.Backend
	identity string // VaultIdentity: what cannot change while it is open

	cfgMu  sync.Mutex
	config string // VaultConfig of the limits in force

	// The tenant key, once read; see tenantKey.
	keyMu    sync.Mutex
	key      []byte
	keyErr   error
	keyTried time.Time

	// ledger writes the request ledger when the backend keeps one
	// (ledger.go); it stops, written out, before the backend closes.
	ledgerOnce sync.Once
	ledger     atomic.Pointer[gateway.LedgerWriter]
}

func (o *openVault) Destruct() error {
	// The lineage of answers already sent is written after them
	// (gateway.AwaitLineage); bounded, so a stuck write never holds a stop.
	ctx, cancel := context.WithTimeout(context.Background(), lineageDrain)
	gateway.AwaitLineage(ctx)
	cancel()
	o.ledgerOnce.Do(func() {}) // no ledger starts after this
	if l := o.ledger.Load(); l != nil {
		l.Close()
	}
	return o.backend.Close()
}

// lineageDrain bounds how long a closing vault waits for the lineage
// records of answers already sent.
const lineageDrain = 5 * time.Second

// tenantKeyRetry is how often a tenant key that could not be read (a
// Redis vault down at start) is tried again.
const tenantKeyRetry = time.Second

// tenantKey is the backend's persistent tenant key. It is read once; a
// failed read is tried again after tenantKeyRetry, so a backend that was
// unreachable when the config loaded is used once it answers.
func (o *openVault) tenantKey() ([]byte, error) {
	o.keyMu.Lock()
	defer o.keyMu.Unlock()
	return o.readKeyLocked()
}

// tryTenantKey is tenantKey for the request path: it never waits for
// another request's read in flight.
func (o *openVault) tryTenantKey() ([]byte, bool) {
	if !o.keyMu.TryLock() {
		return nil, false
	}
	defer o.keyMu.Unlock()
	key, err := o.readKeyLocked()
	return key, err == nil
}

func (o *openVault) readKeyLocked() ([]byte, error) {
	if o.key != nil {
		return o.key, nil
	}
	if o.keyErr != nil && time.Since(o.keyTried) < tenantKeyRetry {
		return nil, o.keyErr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o.key, o.keyErr = o.backend.TenantKey(ctx)
	o.keyTried = time.Now()
	return o.key, o.keyErr
}

// errVaultConfig is a configuration the operator must fix: two handlers of
// one config configure one storage two ways, or (open) a reload changes
// what the open vault cannot change.
type errVaultConfig struct {
	key, have, want string
	open            bool
}

func (e errVaultConfig) Error() string {
	if e.open {
		return fmt.Sprintf("vault %s is open with %s and the new config asks for %s; that cannot change while a loaded config uses it (restart to change it; its limits change on reload)",
			e.key, e.have, e.want)
	}
	return fmt.Sprintf("vault %s is configured twice: %s and %s; one storage has one configuration",
		e.key, e.have, e.want)
}

// claim records m's configuration in this config: two handlers that name
// one storage must configure it alike, and its identity must be the one
// the storage is open with, if it is. It opens nothing.
func (a *App) claim(m VaultBackend) error {
	key, cfg := m.VaultKey(), m.VaultIdentity()+" "+m.VaultConfig()
	a.mu.Lock()
	have, ok := a.claims[key]
	if ok && have != cfg {
		a.mu.Unlock()
		return errVaultConfig{key: key, have: have, want: cfg}
	}
	if !ok {
		a.claims[key] = cfg
		a.used = append(a.used, m)
	}
	a.mu.Unlock()
	if ov := a.peekVault(key); ov != nil && ov.identity != m.VaultIdentity() {
		return errVaultConfig{key: key, have: ov.identity, want: m.VaultIdentity(), open: true}
	}
	return nil
}

// peekVault returns the open vault named key, or nil, without taking a
// share of it.
func (a *App) peekVault(key string) *openVault {
	var found *openVault
	a.shared.vaults.Range(func(k, v any) bool {
		if k == key {
			found = v.(*openVault)
			return false
		}
		return true
	})
	return found
}

// setLimits applies m's limits to the open vault ov when they differ from
// those in force (a reload that resized it).
func (a *App) setLimits(ov *openVault, m VaultBackend) error {
	cfg := m.VaultConfig()
	ov.cfgMu.Lock()
	defer ov.cfgMu.Unlock()
	if ov.config == cfg {
		return nil
	}
	if err := m.SetVaultLimits(ov.backend); err != nil {
		return fmt.Errorf("vault %s: changing its limits to %s: %w", m.VaultKey(), cfg, err)
	}
	a.logger.Info("vault limits changed", zap.String("vault", m.VaultKey()),
		zap.String("from", ov.config), zap.String("to", cfg))
	ov.config = cfg
	return nil
}

// vault returns the shared backend m names, opening it on first use, and
// the function that releases this user's share; with onlyOpen it opens
// nothing and reports ok false when the backend is not open already. An
// identity that conflicts with the open one is an errVaultConfig; any
// other error is the backend failing to open (a damaged database, an
// unreachable server), which the caller reports per request and retries
// on the next load. Limits are applied by Start (setLimits).
func (a *App) vault(m VaultBackend, maxArtifactBytes int64, onlyOpen bool) (ov *openVault, release func(), ok bool, err error) {
	key, id := m.VaultKey(), m.VaultIdentity()
	if onlyOpen && a.peekVault(key) == nil {
		return nil, nil, false, nil
	}
	v, _, err := a.shared.vaults.LoadOrNew(key, func() (caddy.Destructor, error) {
		b, err := m.OpenVault(a.logger.Named("vault"), maxArtifactBytes)
		if err != nil {
			return nil, err
		}
		return &openVault{backend: b, identity: id, config: m.VaultConfig()}, nil
	})
	if err != nil {
		return nil, nil, false, err
	}
	ov = v.(*openVault)
	// Releases hold the shared state itself: Caddy may clean up the App
	// before its handlers.
	sh, log := a.shared, a.logger
	release = func() {
		if _, err := sh.vaults.Delete(key); err != nil {
			log.Error("closing vault", zap.String("vault", key), zap.Error(err))
		}
	}
	if ov.identity != id {
		release()
		return nil, nil, false, errVaultConfig{key: key, have: ov.identity, want: id, open: true}
	}
	return ov, release, true, nil
}

// counter returns the shared token counter of cfg's tokenizer and cache
// size, counting with cfg's budget (tokens.go).
func (a *App) counter(cfg tokens.Config) (compiler.TokenCounter, func(), error) {
	key := countersKey(cfg)
	v, _, err := a.shared.counters.LoadOrNew(key, func() (caddy.Destructor, error) {
		c, err := tokens.New(cfg)
		if err != nil {
			return nil, err
		}
		return counterHandle{counter: c}, nil
	})
	if err != nil {
		return nil, nil, err
	}
	sh := a.shared
	release := func() { _, _ = sh.counters.Delete(key) }
	c, err := v.(counterHandle).counter.WithBudget(cfg.Budget)
	if err != nil {
		release()
		return nil, nil, err
	}
	return c, release, nil
}

func counterKey(cfg tokens.Config) string {
	return fmt.Sprintf("%s|%d|%d", cfg.Tokenizer, cfg.Budget, cfg.CacheBytes)
}

type compilerHandle struct{ c *compiler.Compiler }

func (compilerHandle) Destruct() error { return nil }

// compiler returns the shared compiler for a vault, a counter and options,
// so its caches survive a reload that keeps them.
func (a *App) compiler(vaultKey, counterKey string, opts compiler.Options, store artifact.Store, tc compiler.TokenCounter) (*compiler.Compiler, func(), error) {
	key := compilerKey(vaultKey, counterKey, opts)
	v, _, err := a.shared.compilers.LoadOrNew(key, func() (caddy.Destructor, error) {
		c, err := compiler.New(opts, store, tc)
		if err != nil {
			return nil, err
		}
		return compilerHandle{c}, nil
	})
	if err != nil {
		return nil, nil, err
	}
	sh := a.shared
	return v.(compilerHandle).c, func() { _, _ = sh.compilers.Delete(key) }, nil
}

func compilerKey(vaultKey, counterKey string, opts compiler.Options) string {
	return fmt.Sprintf("%s|%s|%+v", vaultKey, counterKey, opts)
}

// Interface guards
var (
	_ caddy.App          = (*App)(nil)
	_ caddy.Provisioner  = (*App)(nil)
	_ caddy.CleanerUpper = (*App)(nil)
)
