package caddymodule

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/gateway"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// Defaults. They are part of the interface: changing one changes behaviour
// for every operator who did not set the subdirective. This is the only
// place the gateway's defaults are spelled out; the compiler's own are
// referenced, not repeated.
const (
	DefaultMinArtifactChars = compiler.DefaultMinArtifactChars
	DefaultMaxArtifactChars = compiler.DefaultMaxArtifactChars
	DefaultVaultMaxBytes    = vault.DefaultMaxBytes
	DefaultInlineLeases     = compiler.DefaultInlineLeases
	DefaultMaxBodySize      = 32 << 20
	// MaxMaxBodySize bounds max_body_size: a request is held whole in
	// memory while it compiles.
	MaxMaxBodySize              = 1 << 30
	DefaultMode                 = string(compiler.ModeEnforce)
	DefaultTokenizer            = "auto"
	DefaultTokenBudget          = 250 * time.Millisecond
	DefaultTokenCacheSize       = 64 << 20
	DefaultContextCompaction    = true
	DefaultContextMinVaultChars = 4000
	MinContextMinVaultChars     = 500
	DefaultCollapseAfterTurns   = 6
	DefaultInlineRecentTurns    = 5
	DefaultCompileTimeout       = compiler.DefaultTimeout
	DefaultMaxBufferedBytes     = 256 << 20
	DefaultBodyReadTimeout      = 30 * time.Second

	// DefaultVaultSubdir is the vault's directory under Caddy's data
	// directory when none is configured.
	DefaultVaultSubdir = "token-terminator"

	// DefaultBypassHeader is the request header whose value "bypass"
	// forwards a request untouched.
	DefaultBypassHeader = "Token-Terminator"

	// HeaderName is the response header reporting the decision for every
	// candidate request.
	HeaderName = gateway.HeaderName
)

// Placeholders set for every candidate request, for access logs (log_append)
// and for handlers after token_terminator (e.g. header). They hold the
// decision and sizes only, never content.
const (
	PlaceholderDecision  = gateway.PlaceholderDecision  // accepted, shadow or passthrough
	PlaceholderReason    = gateway.PlaceholderReason    // pass-through reason, "" when accepted
	PlaceholderRawBytes  = gateway.PlaceholderRawBytes  // -1 when unknown
	PlaceholderSentBytes = gateway.PlaceholderSentBytes // -1 when unknown
	PlaceholderReceipts  = gateway.PlaceholderReceipts
)

// Handler compiles LLM provider requests before they are proxied: large tool
// results the model has already seen are moved into a vault and replaced by
// short receipts. Put it before reverse_proxy.
//
// Numeric fields are pointers so that an explicit 0 in JSON (for example
// inline_leases 0, which turns lease receipts off) is distinguishable from
// an unset field; unset fields get their defaults in Provision.
type Handler struct {
	// Shorthand for a badger vault in this directory (cannot be combined
	// with vault).
	VaultDir string `json:"vault_dir,omitempty"`

	// Tool results shorter than this many characters are never touched.
	// Default: 8000.
	MinArtifactChars *int `json:"min_artifact_chars,omitempty"`

	// Tool results longer than this many characters are never touched.
	// Default: 2000000.
	MaxArtifactChars *int `json:"max_artifact_chars,omitempty"`

	// Shorthand for the badger vault's max_bytes (cannot be combined with
	// vault). Default: 512 MiB.
	VaultMaxBytes *int64 `json:"vault_max_bytes,omitempty"`

	// How many forwarded requests of one conversation may carry a large
	// artifact inline before later requests get a receipt instead.
	// 0 turns lease receipts off. Default: 1.
	InlineLeases *int `json:"inline_leases,omitempty"`

	// Candidate bodies larger than this many bytes stream through
	// untouched and are never held whole in memory. Default: 32 MiB.
	MaxBodySize *int64 `json:"max_body_size,omitempty"`

	// enforce (forward the rewrite when the gate accepts it), shadow
	// (compile, record and report, but forward the original) or off.
	// Default: enforce.
	Mode string `json:"mode,omitempty"`

	// Optional extra conversation key, usually a placeholder such as
	// {http.request.header.X-Session-Id}. It is evaluated per request and
	// hashed before it reaches the compiler.
	Session string `json:"session,omitempty"`

	// Token counter: auto (by the request's model), o200k_base,
	// cl100k_base or off. Default: auto.
	Tokenizer string `json:"tokenizer,omitempty"`

	// How long token counting may take per request before the token veto
	// is skipped. Default: 250ms.
	TokenBudget caddy.Duration `json:"token_budget,omitempty"`

	// Bytes of memory for the cache of token counts. Default: 64 MiB.
	TokenCacheSize *int64 `json:"token_cache_size,omitempty"`

	// Context compaction of old turns. Default: true.
	ContextCompaction *bool `json:"context_compaction,omitempty"`

	// Old tool results at least this long are vaulted by compaction
	// (at least 500). Default: 4000.
	ContextMinVaultChars *int `json:"context_min_vault_chars,omitempty"`

	// Turns older than this many most recent are folded into summaries;
	// 0 never folds. Must be 0 or >= inline_recent_turns. Default: 6.
	CollapseAfterTurns *int `json:"collapse_after_turns,omitempty"`

	// The last this many turns are never changed by compaction.
	// Default: 5.
	InlineRecentTurns *int `json:"inline_recent_turns,omitempty"`

	// Upper bound of one compile; past it the original goes upstream.
	// Default: 2s.
	CompileTimeout caddy.Duration `json:"compile_timeout,omitempty"`

	// Upper bound of the memory this handler's requests hold at once: each
	// candidate's body, reserved as it arrives (bodies being read hold at
	// most a fifth of the bound together), and its compile's working
	// memory, a small multiple of the body, reserved when the body is
	// whole and held until the compile ends. This
	// bounds the module's memory under a burst of large requests; a
	// candidate that does not fit streams through untouched
	// (passthrough=busy). Default: 256MiB.
	MaxBufferedBytes *int64 `json:"max_buffered_bytes,omitempty"`

	// Most compiles this handler runs at once; a candidate that finds every
	// slot taken waits for one within compile_timeout, then goes upstream
	// uncompiled (passthrough=busy). Compiles are CPU work, so more of them
	// than cores only hold more memory for longer. Default: the number of
	// CPUs the process may use (GOMAXPROCS).
	MaxConcurrentCompiles *int `json:"max_concurrent_compiles,omitempty"`

	// Longest the handler waits for a candidate's body; past it, what has
	// arrived and the rest stream through untouched (passthrough=slow_body),
	// so a slow client holds no buffer budget. Default: 30s.
	BodyReadTimeout caddy.Duration `json:"body_read_timeout,omitempty"`

	// The vault backend, a module of the token_terminator.vaults namespace
	// selected by its "backend" key, e.g. {"backend":"badger","dir":"…"}.
	// Default: badger in Caddy's data directory + "/token-terminator".
	VaultRaw json.RawMessage `json:"vault,omitempty" caddy:"namespace=token_terminator.vaults inline_key=backend"`

	// Refuse to start (or reload) when the vault cannot open, naming it,
	// instead of passing candidates through (passthrough=vault_error)
	// until a reload opens it. Default: off (fail open).
	RequireVault *bool `json:"require_vault,omitempty"`

	// Key of the tenant hash, usually a placeholder such as
	// {env.TT_TENANT_KEY} or {file./etc/tt/tenant.key}, resolved once when
	// the config loads; every gateway of a fleet that shares it computes
	// the same tenants. Default: the vault backend's own persistent key.
	TenantKey string `json:"tenant_key,omitempty"`

	// Encryption at rest of vaulted content: each artifact and folded turn
	// is sealed (AES-256-GCM) under keys derived from the request's
	// credential, or its configured tenant identity, and the tenant key;
	// the vault holds neither. Default: on.
	Encrypt *bool `json:"encrypt,omitempty"`

	// Identity that decides a request's tenant, usually a placeholder set
	// by an auth layer in front, e.g. {http.auth.user.id}. When set, it
	// alone decides (the credential never overrides it; a request whose
	// identity is empty has no tenant, passthrough=no_tenant), on the
	// request path and the artifact API alike. Default: the provider
	// credential (the format's own header order). A warning is logged at
	// start when it is taken from a value a client sets (a request header,
	// cookie or query).
	Tenant string `json:"tenant,omitempty"`

	// Characters of the working-state block: an index of the artifacts a
	// rewrite's receipts and folds name, added at the end of a request
	// that ends with a user message (compiler/working_state.go). 0 (the
	// default) adds none; otherwise 512 to 65536.
	WorkingStateChars int `json:"working_state_chars,omitempty"`

	// What the next request carries of an artifact the model recovered
	// with the recovery tool, for inline_leases requests: "on" (the
	// default) carries it inline; "cost" lets the cost decision weigh that
	// against keeping the receipt and the recovery round it would cause;
	// "off" treats it like any other artifact (receipted by the usual
	// rules). The final gate judges every rewrite whatever the value.
	ReinlineRecovered string `json:"reinline_recovered,omitempty"`

	// Request header that makes the gateway forward a request untouched
	// when its value is "bypass" (passthrough=bypass); it is removed
	// before the request goes upstream. Default: Token-Terminator.
	BypassHeader string `json:"bypass_header,omitempty"`

	// How long the request ledger keeps a record. Default: 720h (30 days).
	LedgerRetention caddy.Duration `json:"ledger_retention,omitempty"`

	// Most records the ledger keeps; the oldest go first. Default: 200000.
	LedgerMaxRecords *int64 `json:"ledger_max_records,omitempty"`

	// Most bytes of ledger records kept; the oldest go first.
	// Default: 64MiB.
	LedgerMaxBytes *int64 `json:"ledger_max_bytes,omitempty"`

	// Operator names of tenants for the savings page and the ledger, by
	// tenant id: the 32 hex digits of the ledger's tenant field, a keyed
	// hash under the tenant key (so a caller cannot grind a credential
	// into another team's line). Only verified tenants are labelled.
	TenantLabels map[string]string `json:"tenant_labels,omitempty"`

	// Who becomes a tenant (tenant_config.go).
	TenantSettings
	// Recovery of vaulted content: the artifact API and the model's
	// recovery tool (recovery_config.go).
	RecoveryConfig
	// The cost model's settings (cost_model, cost_horizon,
	// cost_bytes_per_token, cost_prices); see cost_config.go.
	CostSettings
	// The holdout, exclude_tools and tenant_settings (holdout.go).
	HoldoutSettings

	handlerState // provisioned state, see handler.go
}

func intp(v int) *int       { return &v }
func int64p(v int64) *int64 { return &v }
func boolp(v bool) *bool    { return &v }

// usesShorthand reports whether the old vault_dir / vault_max_bytes
// subdirectives are set.
func (h *Handler) usesShorthand() bool { return h.VaultDir != "" || h.VaultMaxBytes != nil }

// applyDefaults fills every unset field with its default.
func (h *Handler) applyDefaults() {
	if h.VaultRaw == nil {
		// No vault block: the shorthand (or nothing) names a badger vault.
		if h.VaultDir == "" {
			h.VaultDir = defaultVaultDir()
		}
		if h.VaultMaxBytes == nil {
			h.VaultMaxBytes = int64p(DefaultVaultMaxBytes)
		}
	}
	if h.MinArtifactChars == nil {
		h.MinArtifactChars = intp(DefaultMinArtifactChars)
	}
	if h.MaxArtifactChars == nil {
		h.MaxArtifactChars = intp(DefaultMaxArtifactChars)
	}
	if h.InlineLeases == nil {
		h.InlineLeases = intp(DefaultInlineLeases)
	}
	if h.MaxBodySize == nil {
		h.MaxBodySize = int64p(DefaultMaxBodySize)
	}
	if h.Mode == "" {
		h.Mode = DefaultMode
	}
	if h.Tokenizer == "" {
		h.Tokenizer = DefaultTokenizer
	}
	if h.TokenBudget == 0 {
		h.TokenBudget = caddy.Duration(DefaultTokenBudget)
	}
	if h.TokenCacheSize == nil {
		h.TokenCacheSize = int64p(DefaultTokenCacheSize)
	}
	if h.ContextCompaction == nil {
		h.ContextCompaction = boolp(DefaultContextCompaction)
	}
	if h.ContextMinVaultChars == nil {
		h.ContextMinVaultChars = intp(DefaultContextMinVaultChars)
	}
	if h.CollapseAfterTurns == nil {
		h.CollapseAfterTurns = intp(DefaultCollapseAfterTurns)
	}
	if h.InlineRecentTurns == nil {
		h.InlineRecentTurns = intp(DefaultInlineRecentTurns)
	}
	if h.CompileTimeout == 0 {
		h.CompileTimeout = caddy.Duration(DefaultCompileTimeout)
	}
	if h.MaxBufferedBytes == nil {
		h.MaxBufferedBytes = int64p(DefaultMaxBufferedBytes)
	}
	if h.BodyReadTimeout == 0 {
		h.BodyReadTimeout = caddy.Duration(DefaultBodyReadTimeout)
	}
	if h.MaxConcurrentCompiles == nil {
		h.MaxConcurrentCompiles = intp(runtime.GOMAXPROCS(0))
	}
	if h.BypassHeader == "" {
		h.BypassHeader = DefaultBypassHeader
	}
	h.applyRecoveryDefaults()
	h.applyTenantDefaults()
}

// Validate checks the configuration. Unset fields are checked as their
// defaults, so it gives the same answer before and after Provision. Caddy
// prefixes its errors with the module id, so they don't repeat it.
func (h *Handler) Validate() error {
	if h.VaultRaw != nil && h.usesShorthand() {
		name := "vault_dir"
		if h.VaultDir == "" {
			name = "vault_max_bytes"
		}
		return fmt.Errorf("%s cannot be combined with a vault block: set dir and max_bytes inside the vault block", name)
	}
	c := *h
	c.applyDefaults()
	return c.check()
}

// check validates a configuration whose defaults are applied, one group of
// settings after another; the first error found is returned.
func (h *Handler) check() error {
	for _, c := range []func() error{
		h.checkVault,
		h.checkArtifacts,
		h.checkRequests,
		h.checkCompaction,
		h.checkLimits,
		func() error { return compiler.CheckWorkingStateChars(h.WorkingStateChars) },
		func() error { return compiler.CheckReinlineRecovered(h.ReinlineRecovered) },
		h.checkRecovery,
		h.checkTenant,
		h.checkHoldout,
		func() error { _, err := h.costConfig(); return err },
		h.checkObserve,
	} {
		if err := c(); err != nil {
			return err
		}
	}
	return nil
}

// checkVault checks the shorthand vault settings (vault_dir,
// vault_max_bytes) when no vault block is set.
func (h *Handler) checkVault() error {
	if h.VaultRaw != nil {
		return nil
	}
	if strings.TrimSpace(h.VaultDir) == "" {
		return fmt.Errorf("vault_dir must not be empty")
	}
	if *h.VaultMaxBytes < 1 {
		return fmt.Errorf("vault_max_bytes must be positive, got %d", *h.VaultMaxBytes)
	}
	return nil
}

// checkArtifacts checks the bounds on what is vaulted and inlined.
func (h *Handler) checkArtifacts() error {
	if *h.MinArtifactChars < 1 {
		return fmt.Errorf("min_artifact_chars must be at least 1, got %d", *h.MinArtifactChars)
	}
	if *h.MaxArtifactChars < 1 {
		return fmt.Errorf("max_artifact_chars must be at least 1, got %d", *h.MaxArtifactChars)
	}
	if *h.MinArtifactChars > *h.MaxArtifactChars {
		return fmt.Errorf("min_artifact_chars (%d) must not exceed max_artifact_chars (%d)", *h.MinArtifactChars, *h.MaxArtifactChars)
	}
	if *h.InlineLeases < 0 {
		return fmt.Errorf("inline_leases must be 0 (off) or more, got %d", *h.InlineLeases)
	}
	return nil
}

// checkRequests checks how a request is read, compiled and its tokens
// counted: body size, mode, tokenizer and token budget and cache.
func (h *Handler) checkRequests() error {
	if *h.MaxBodySize < 1 || *h.MaxBodySize > MaxMaxBodySize {
		return fmt.Errorf("max_body_size must be between 1 and %d bytes, got %d", MaxMaxBodySize, *h.MaxBodySize)
	}
	switch compiler.Mode(h.Mode) {
	case compiler.ModeEnforce, compiler.ModeShadow, compiler.ModeOff:
	default:
		return fmt.Errorf("mode must be enforce, shadow or off, got %q", h.Mode)
	}
	if !provider.KnownTokenizer(h.Tokenizer) {
		return fmt.Errorf("tokenizer must be %s, got %q", provider.TokenizerChoices, h.Tokenizer)
	}
	if h.TokenBudget < 0 {
		return fmt.Errorf("token_budget must be positive, got %s", time.Duration(h.TokenBudget))
	}
	if *h.TokenCacheSize < 1 {
		return fmt.Errorf("token_cache_size must be positive, got %d", *h.TokenCacheSize)
	}
	return nil
}

// checkCompaction checks when old turns are vaulted, folded and kept
// inline.
func (h *Handler) checkCompaction() error {
	if *h.ContextMinVaultChars < MinContextMinVaultChars {
		return fmt.Errorf("context_min_vault_chars must be at least %d, got %d", MinContextMinVaultChars, *h.ContextMinVaultChars)
	}
	if *h.CollapseAfterTurns < 0 {
		return fmt.Errorf("collapse_after_turns must be 0 (never fold) or more, got %d", *h.CollapseAfterTurns)
	}
	if *h.InlineRecentTurns < 0 {
		return fmt.Errorf("inline_recent_turns must be 0 or more, got %d", *h.InlineRecentTurns)
	}
	if c, r := *h.CollapseAfterTurns, *h.InlineRecentTurns; c != 0 && c < r {
		return fmt.Errorf("collapse_after_turns (%d) must be 0 or at least inline_recent_turns (%d)", c, r)
	}
	return nil
}

// checkLimits checks the time, memory and concurrency bounds of
// compiling.
func (h *Handler) checkLimits() error {
	if h.CompileTimeout < 0 {
		return fmt.Errorf("compile_timeout must be positive, got %s", time.Duration(h.CompileTimeout))
	}
	if h.BodyReadTimeout < 0 {
		return fmt.Errorf("body_read_timeout must be positive, got %s", time.Duration(h.BodyReadTimeout))
	}
	if *h.MaxBufferedBytes < 1 {
		return fmt.Errorf("max_buffered_bytes must be positive, got %d", *h.MaxBufferedBytes)
	}
	if *h.MaxConcurrentCompiles < 1 {
		return fmt.Errorf("max_concurrent_compiles must be at least 1, got %d", *h.MaxConcurrentCompiles)
	}
	return nil
}

// compilerOptions maps the configuration onto compiler.Options, every
// field set explicitly (zero compaction turn counts are meaningful). The
// cost configuration was validated by check.
func (h *Handler) compilerOptions() compiler.Options {
	costCfg, _ := h.costConfig()
	return compiler.Options{
		Cost:             costCfg,
		MinArtifactChars: *h.MinArtifactChars,
		MaxArtifactChars: *h.MaxArtifactChars,
		InlineLeases:     *h.InlineLeases,
		Timeout:          time.Duration(h.CompileTimeout),
		Compaction: compiler.Compaction{
			Enabled:            *h.ContextCompaction,
			MinVaultChars:      *h.ContextMinVaultChars,
			CollapseAfterTurns: *h.CollapseAfterTurns,
			InlineRecentTurns:  *h.InlineRecentTurns,
		},
		Recovery:          h.gw.CompilerRecovery(),
		WorkingStateChars: h.WorkingStateChars,
		ReinlineRecovered: h.ReinlineRecovered,
		ExcludeTools:      h.ExcludeTools,
		WorkAhead:         true,
	}
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

// checkRecovery validates a configuration whose defaults are applied.
func (c *RecoveryConfig) checkRecovery() error {
	switch c.Recovery {
	case RecoveryTool, RecoveryAPI, RecoveryOff:
	default:
		return fmt.Errorf("recovery must be tool, api or off, got %q", c.Recovery)
	}
	if !strings.HasPrefix(c.RecoveryPath, "/") || strings.ContainsAny(c.RecoveryPath, "?#* \t") {
		return fmt.Errorf("recovery_path must be a path starting with '/', got %q", c.RecoveryPath)
	}
	if *c.MaxRecoveryRounds < 1 {
		return fmt.Errorf("max_recovery_rounds must be at least 1, got %d", *c.MaxRecoveryRounds)
	}
	if *c.MaxRecoveryCalls < 1 {
		return fmt.Errorf("max_recovery_calls must be at least 1, got %d", *c.MaxRecoveryCalls)
	}
	if *c.MaxPageChars < 1 {
		return fmt.Errorf("max_page_chars must be at least 1, got %d", *c.MaxPageChars)
	}
	if *c.MaxSearchResults < 1 {
		return fmt.Errorf("max_search_results must be at least 1, got %d", *c.MaxSearchResults)
	}
	return nil
}

// checkTenant validates the tenant settings.
func (h *Handler) checkTenant() error {
	if *h.MaxNewTenantsPerMinute < 1 {
		return fmt.Errorf("max_new_tenants_per_minute must be at least 1, got %d", *h.MaxNewTenantsPerMinute)
	}
	return nil
}
