package caddymodule

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"

	"github.com/tokenterminator/caddy-token-terminator/internal/holdout"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("token_terminator", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("token_terminator", httpcaddyfile.Before, "reverse_proxy")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var t Handler
	err := t.UnmarshalCaddyfile(h.Dispenser)
	return &t, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	token_terminator [<matcher>] {
//	    vault <backend> {           # e.g. vault badger { dir …; max_bytes … }
//	        …
//	    }
//	    vault_dir               <path>    # shorthand: vault badger { dir <path> }
//	    vault_max_bytes         <size>    # shorthand: vault badger { max_bytes <size> }
//	    require_vault           on|off    # refuse to start when the vault cannot open
//	    tenant_key              <key>     # e.g. {env.TT_TENANT_KEY}
//	    tenant                  <placeholder>
//	    max_new_tenants_per_minute <n>
//	    min_artifact_chars      <n>
//	    max_artifact_chars      <n>
//	    inline_leases           <n>
//	    max_body_size           <size>
//	    mode                    enforce|shadow|off
//	    session                 <placeholder>
//	    tokenizer               auto|o200k_base|cl100k_base|off
//	    token_budget            <duration>
//	    token_cache_size        <size>
//	    context_compaction      on|off
//	    context_min_vault_chars <n>
//	    collapse_after_turns    <n>
//	    inline_recent_turns     <n>
//	    compile_timeout         <duration>
//	    max_buffered_bytes      <size>
//	    max_concurrent_compiles <n>
//	    body_read_timeout       <duration>
//	    cost_model              on|off
//	    cost_horizon            <n>
//	    cost_bytes_per_token    <x>
//	    cost_prices anthropic|openai|other|gemini {   # once per family
//	        cache_read <x>; cache_write <x>; cache_write_1h <x>
//	        min_prefix <tokens>; granularity <tokens>; ttl <duration>
//	    }
//	    bypass_header           <name>
//	    working_state_chars     <n>       # 0 (off) or 512..65536
//	    reinline_recovered      on|cost|off
//	    ledger_retention        <duration>
//	    ledger_max_records      <n>
//	    ledger_max_bytes        <size>
//	    tenant_label            <tenant-id> <name>   # repeatable
//	    holdout                 <percent>  # e.g. 5%
//	    exclude_tools           <name…>    # repeatable
//	    tenant_settings <label> {          # once per label
//	        min_artifact_chars <n>; holdout <percent>; mode enforce|shadow|off
//	    }
//	}
//
// Every subdirective but vault, cost_prices, tenant_label, exclude_tools and tenant_settings takes exactly one
// argument, and each may appear once. The resulting configuration (with defaults for what is
// unset) is checked here too, so `caddy adapt` already refuses bad values.
// Caddy prefixes these errors with the directive, so they don't repeat it.
func (t *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name
	if d.NextArg() {
		return d.Errf("takes no inline arguments (got '%s'); use a block", d.Val())
	}
	seen := make(map[string]bool)
	for d.NextBlock(0) {
		name := d.Val()
		if parse, ok := blockSubdirectives[name]; ok {
			if err := parse(t, d); err != nil {
				return err
			}
			continue
		}
		set, known := subdirectives[name]
		if !known {
			return d.Errf("unrecognized subdirective '%s'", name)
		}
		if err := oneArg(d, name, seen, func(v string) error { return set(t, v) }); err != nil {
			return err
		}
	}
	if err := t.Validate(); err != nil {
		return d.Err(err.Error())
	}
	return nil
}

// blockSubdirectives maps each subdirective that takes a block or several
// arguments to its parser; subdirectives has the one-argument ones. The two
// tables are the whole Caddyfile syntax (docs/configuration.md is checked
// against them).
var blockSubdirectives = map[string]func(t *Handler, d *caddyfile.Dispenser) error{
	"vault":        (*Handler).unmarshalVault,
	"cost_prices":  (*Handler).unmarshalCostPrices, // one block per family, see cost_config.go
	"tenant_label": (*Handler).unmarshalTenantLabel,
	// holdout.go
	"exclude_tools":   (*Handler).unmarshalExcludeTools,
	"tenant_settings": (*Handler).unmarshalTenantSettings,
}

// unmarshalVault reads `vault <backend> { … }` with the backend module's
// own Caddyfile unmarshaler.
func (t *Handler) unmarshalVault(d *caddyfile.Dispenser) error {
	if t.VaultRaw != nil {
		return d.Errf("duplicate subdirective 'vault'")
	}
	if !d.NextArg() {
		return d.Errf("vault needs a backend name, e.g. 'vault badger { dir … }'")
	}
	backend := d.Val()
	id := "token_terminator.vaults." + backend
	if _, err := caddy.GetModule(id); err != nil {
		return d.Errf("unknown vault backend '%s'", backend)
	}
	unm, err := caddyfile.UnmarshalModule(d, id)
	if err != nil {
		return err
	}
	t.VaultRaw = caddyconfig.JSONModuleObject(unm, "backend", backend, nil)
	return nil
}

// oneArg reads the one argument of subdirective name (which must not repeat
// and takes no block) and hands it to set.
func oneArg(d *caddyfile.Dispenser, name string, seen map[string]bool, set func(string) error) error {
	if seen[name] {
		return d.Errf("duplicate subdirective '%s'", name)
	}
	seen[name] = true
	if !d.NextArg() {
		return d.ArgErr()
	}
	val := d.Val()
	if d.NextArg() {
		return d.Errf("%s takes exactly one argument, got extra '%s'", name, d.Val())
	}
	if d.NextBlock(1) {
		return d.Errf("%s takes no block", name)
	}
	if err := set(val); err != nil {
		return d.Errf("%s: %v", name, err)
	}
	return nil
}

// parseBlock reads `<name> { sub arg … }` where every subdirective takes one
// argument (the vault backends' blocks).
func parseBlock(d *caddyfile.Dispenser, what string, setters map[string]func(string) error) error {
	d.Next() // consume the block's name
	if d.NextArg() {
		return d.Errf("%s takes no inline arguments (got '%s'); use a block", what, d.Val())
	}
	seen := make(map[string]bool)
	for d.NextBlock(0) {
		name := d.Val()
		set, known := setters[name]
		if !known {
			return d.Errf("unrecognized %s subdirective '%s'", what, name)
		}
		if err := oneArg(d, name, seen, set); err != nil {
			return err
		}
	}
	return nil
}

// subdirectives maps each one-argument subdirective to its setter: the
// handler's one table of them.
var subdirectives = map[string]func(t *Handler, v string) error{
	"vault_dir":               func(t *Handler, v string) error { t.VaultDir = v; return nil },
	"vault_max_bytes":         func(t *Handler, v string) error { return setSize(&t.VaultMaxBytes, v) },
	"tenant_key":              func(t *Handler, v string) error { t.TenantKey = v; return nil },
	"tenant":                  func(t *Handler, v string) error { t.Tenant = v; return nil },
	"min_artifact_chars":      func(t *Handler, v string) error { return setInt(&t.MinArtifactChars, v, 1) },
	"max_artifact_chars":      func(t *Handler, v string) error { return setInt(&t.MaxArtifactChars, v, 1) },
	"inline_leases":           func(t *Handler, v string) error { return setInt(&t.InlineLeases, v, 0) },
	"max_body_size":           func(t *Handler, v string) error { return setSize(&t.MaxBodySize, v) },
	"context_min_vault_chars": func(t *Handler, v string) error { return setInt(&t.ContextMinVaultChars, v, MinContextMinVaultChars) },
	"collapse_after_turns":    func(t *Handler, v string) error { return setInt(&t.CollapseAfterTurns, v, 0) },
	"inline_recent_turns":     func(t *Handler, v string) error { return setInt(&t.InlineRecentTurns, v, 0) },
	"token_cache_size":        func(t *Handler, v string) error { return setSize(&t.TokenCacheSize, v) },
	"token_budget":            func(t *Handler, v string) error { return setDuration(&t.TokenBudget, v) },
	"compile_timeout":         func(t *Handler, v string) error { return setDuration(&t.CompileTimeout, v) },
	"max_buffered_bytes":      func(t *Handler, v string) error { return setSize(&t.MaxBufferedBytes, v) },
	"max_concurrent_compiles": func(t *Handler, v string) error { return setInt(&t.MaxConcurrentCompiles, v, 1) },
	"body_read_timeout":       func(t *Handler, v string) error { return setDuration(&t.BodyReadTimeout, v) },
	"bypass_header":           func(t *Handler, v string) error { t.BypassHeader = v; return nil },
	"ledger_retention":        func(t *Handler, v string) error { return setDuration(&t.LedgerRetention, v) },
	"ledger_max_records": func(t *Handler, v string) error {
		var n *int
		if err := setInt(&n, v, 1); err != nil {
			return err
		}
		t.LedgerMaxRecords = int64p(int64(*n))
		return nil
	},
	"ledger_max_bytes": func(t *Handler, v string) error { return setSize(&t.LedgerMaxBytes, v) },
	"working_state_chars": func(t *Handler, v string) error {
		var n *int
		if err := setInt(&n, v, 0); err != nil {
			return err
		}
		t.WorkingStateChars = *n
		return nil
	},
	"reinline_recovered": func(t *Handler, v string) error {
		switch v {
		case "on", "cost", "off":
			t.ReinlineRecovered = v
			return nil
		}
		return fmt.Errorf("want on, cost or off, got '%s'", v)
	},
	"mode": func(t *Handler, v string) error {
		switch v {
		case "enforce", "shadow", "off":
			t.Mode = v
			return nil
		}
		return fmt.Errorf("want enforce, shadow or off, got '%s'", v)
	},
	"session": func(t *Handler, v string) error {
		t.Session = v
		return nil
	},
	"tokenizer": func(t *Handler, v string) error {
		if !provider.KnownTokenizer(v) {
			return fmt.Errorf("want %s, got '%s'", provider.TokenizerChoices, v)
		}
		t.Tokenizer = v
		return nil
	},
	"holdout": func(t *Handler, v string) error {
		if _, err := holdout.ParseShare(v); err != nil {
			return err
		}
		t.Holdout = v
		return nil
	},
	"context_compaction": func(t *Handler, v string) error { return setOnOff(&t.ContextCompaction, v) },
	"require_vault":      func(t *Handler, v string) error { return setOnOff(&t.RequireVault, v) },
	// Recovery (recovery_config.go).
	"recovery": func(t *Handler, v string) error {
		switch v {
		case RecoveryTool, RecoveryAPI, RecoveryOff:
			t.Recovery = v
			return nil
		}
		return fmt.Errorf("want tool, api or off, got '%s'", v)
	},
	"recovery_path":       func(t *Handler, v string) error { t.RecoveryPath = v; return nil },
	"max_recovery_rounds": func(t *Handler, v string) error { return setInt(&t.MaxRecoveryRounds, v, 1) },
	"max_recovery_calls":  func(t *Handler, v string) error { return setInt(&t.MaxRecoveryCalls, v, 1) },
	"max_page_chars":      func(t *Handler, v string) error { return setInt(&t.MaxPageChars, v, 1) },
	"max_search_results":  func(t *Handler, v string) error { return setInt(&t.MaxSearchResults, v, 1) },
	// Tenants (tenant_config.go).
	"max_new_tenants_per_minute": func(t *Handler, v string) error {
		return setInt(&t.MaxNewTenantsPerMinute, v, 1)
	},
	// The cost model (cost_config.go).
	"cost_model":           func(t *Handler, v string) error { return setOnOff(&t.CostModel, v) },
	"cost_horizon":         func(t *Handler, v string) error { return setInt(&t.CostHorizon, v, 1) },
	"cost_lease_min_chars": func(t *Handler, v string) error { return setInt(&t.CostLeaseMinChars, v, 1) },
	"cost_bytes_per_token": func(t *Handler, v string) error { return setPositiveFloat(&t.CostBytesPerToken, v) },
	"cost_currency": func(t *Handler, v string) error {
		if len(v) < 1 || len(v) > 8 || strings.ContainsAny(v, " \t\"<>&") {
			return fmt.Errorf("want a currency code such as USD, got '%s'", v)
		}
		t.CostCurrency = v
		return nil
	},
	// Encryption at rest (seal.go).
	"encrypt": func(t *Handler, v string) error { return setOnOff(&t.Encrypt, v) },
}

func setInt(dst **int, v string, min int) error {
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("not an integer: '%s'", v)
	}
	if n < min {
		return fmt.Errorf("must be at least %d, got %d", min, n)
	}
	*dst = &n
	return nil
}

func setSize(dst **int64, v string) error {
	t := strings.TrimSpace(v)
	if t == "" {
		return fmt.Errorf("empty size; want a positive size such as 512MiB")
	}
	if strings.HasPrefix(t, "-") {
		return fmt.Errorf("size must be positive, got '%s'", v)
	}
	n, err := humanize.ParseBytes(t)
	if err != nil {
		// humanize's own message ("strconv.ParseFloat: …") names neither
		// the value nor what would be right.
		return fmt.Errorf("bad size '%s': want a number with an optional unit, such as 512MiB or 2GB", v)
	}
	if n == 0 || n > math.MaxInt64 {
		return fmt.Errorf("size must be positive and fit in 63 bits, got '%s'", v)
	}
	s := int64(n)
	*dst = &s
	return nil
}

func setDuration(dst *caddy.Duration, v string) error {
	dur, err := caddy.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("bad duration '%s': %v", v, err)
	}
	if dur <= 0 {
		return fmt.Errorf("duration must be positive, got '%s'", v)
	}
	*dst = caddy.Duration(dur)
	return nil
}

// Interface guard
var _ caddyfile.Unmarshaler = (*Handler)(nil)

// setOnOff reads an on|off switch.
func setOnOff(dst **bool, v string) error {
	switch v {
	case "on":
		*dst = boolp(true)
	case "off":
		*dst = boolp(false)
	default:
		return fmt.Errorf("want on or off, got '%s'", v)
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
