package caddymodule

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// DefaultCostModel: decisions are made by expected billed cost unless
// cost_model off.
const DefaultCostModel = true

// CostSettings is the handler's configuration of the cost model
// (compiler.Options.Cost). Unset fields keep the cost package's defaults,
// which are documented there with their sources.
type CostSettings struct {
	// Decide by expected billed cost (on), or by bytes and tokens only
	// (off). Default: on.
	CostModel *bool `json:"cost_model,omitempty"`
	// Most following requests a move of the fold boundary (a rewrite of
	// the cached prefix) may pay back over, at least 1; receipts pay back
	// over at least cost.DefaultReceiptHorizon. Default:
	// cost.DefaultMaxHorizon.
	CostHorizon *int `json:"cost_horizon,omitempty"`
	// Bytes per token where no tokenizer counts them (positive). Default:
	// cost.DefaultBytesPerToken.
	CostBytesPerToken *float64 `json:"cost_bytes_per_token,omitempty"`
	// Smallest answered tool result (characters) a lease may receipt when
	// the cost decision finds it pays back; results of min_artifact_chars
	// or more lease whatever the cost. At least 1. Default:
	// cost.DefaultLeaseMinChars.
	CostLeaseMinChars *int `json:"cost_lease_min_chars,omitempty"`
	// Price and cache figures per provider family: anthropic, openai,
	// other or gemini. Unset figures keep the published defaults.
	CostPrices map[string]CostPrices `json:"cost_prices,omitempty"`
	// Currency of the families' input_price, e.g. USD; with it the
	// ledger and the savings page show costs as money. Required with any
	// input_price.
	CostCurrency string `json:"cost_currency,omitempty"`
}

// CostPrices overrides one family's figures (cost.Overrides).
type CostPrices struct {
	// Multipliers of the base input price, in [0, 10].
	CacheRead    *float64 `json:"cache_read,omitempty"`
	CacheWrite   *float64 `json:"cache_write,omitempty"`
	CacheWrite1h *float64 `json:"cache_write_1h,omitempty"`
	// Smallest cacheable prefix, in tokens (0 or more).
	MinPrefix *int `json:"min_prefix,omitempty"`
	// Block size in tokens a cache hit is counted in (at least 1).
	Granularity *int `json:"granularity,omitempty"`
	// How long an unused cache entry survives (positive).
	TTL *caddy.Duration `json:"ttl,omitempty"`
	// Price of one million input tokens at the base (uncached) price, in
	// cost_currency (positive). Only for showing costs as money: the
	// decisions use the multipliers alone.
	InputPrice *float64 `json:"input_price,omitempty"`
}

// priceOf is the money of one base-price input token of a request's
// family and the currency, or 0 and "" when no price is configured.
func (c *CostSettings) priceOf(format provider.Format, model string) (float64, string) {
	if c.CostCurrency == "" {
		return 0, ""
	}
	p, ok := c.CostPrices[string(cost.FamilyOf(format, model))]
	if !ok || p.InputPrice == nil {
		return 0, ""
	}
	return *p.InputPrice / 1e6, c.CostCurrency
}

// costConfig maps the settings onto cost.Config, or names the first bad
// value. Every family's figures go through cost.Config.Validate, the cost
// model's own rules.
func (c *CostSettings) costConfig() (cost.Config, error) {
	var cfg cost.Config
	on := DefaultCostModel
	if c.CostModel != nil {
		on = *c.CostModel
	}
	cfg.Off = !on
	if c.CostHorizon != nil {
		if *c.CostHorizon < 1 {
			return cfg, fmt.Errorf("cost_horizon must be at least 1, got %d", *c.CostHorizon)
		}
		cfg.MaxHorizon = *c.CostHorizon
	}
	if c.CostLeaseMinChars != nil {
		if *c.CostLeaseMinChars < 1 {
			return cfg, fmt.Errorf("cost_lease_min_chars must be at least 1, got %d", *c.CostLeaseMinChars)
		}
		cfg.LeaseMinChars = *c.CostLeaseMinChars
	}
	if c.CostBytesPerToken != nil {
		if v := *c.CostBytesPerToken; !(v > 0) || math.IsInf(v, 0) {
			return cfg, fmt.Errorf("cost_bytes_per_token must be positive, got %v", v)
		}
		cfg.BytesPerToken = *c.CostBytesPerToken
	}
	for name, p := range c.CostPrices {
		if p.InputPrice != nil {
			if v := *p.InputPrice; !(v > 0) || math.IsInf(v, 0) {
				return cfg, fmt.Errorf("cost_prices %s input_price must be positive, got %v", name, v)
			}
			if c.CostCurrency == "" {
				return cfg, fmt.Errorf("cost_prices %s input_price needs cost_currency (e.g. cost_currency USD)", name)
			}
		}
		o := cost.Overrides{CacheRead: p.CacheRead, CacheWrite: p.CacheWrite, CacheWrite1h: p.CacheWrite1h,
			MinPrefix: p.MinPrefix, Granularity: p.Granularity}
		if p.TTL != nil {
			d := time.Duration(*p.TTL)
			o.TTL = &d
		}
		if !cfg.SetOverrides(cost.Family(name), o) {
			return cfg, fmt.Errorf("cost_prices: unknown family '%s' (want %s)", name, familyNames())
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("cost_prices: %v", err)
	}
	return cfg, nil
}

func familyNames() string {
	names := make([]string, len(cost.Families))
	for i, f := range cost.Families {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}

// unmarshalCostPrices reads `cost_prices <family> { … }`, once per family.
// The block is read on its own dispenser (nesting from 0, as the vault
// backends' blocks are), so the one-argument rules of oneArg apply inside.
func (t *Handler) unmarshalCostPrices(outer *caddyfile.Dispenser) error {
	d := outer.NewFromNextSegment()
	d.Next() // consume "cost_prices"
	if !d.NextArg() {
		return d.Errf("cost_prices needs a family (%s)", familyNames())
	}
	family := d.Val()
	if !slices.Contains(cost.Families, cost.Family(family)) {
		return d.Errf("cost_prices: unknown family '%s' (want %s)", family, familyNames())
	}
	if d.NextArg() {
		return d.Errf("cost_prices takes one family, got extra '%s'", d.Val())
	}
	if _, dup := t.CostPrices[family]; dup {
		return d.Errf("duplicate cost_prices '%s'", family)
	}
	var p CostPrices
	setters := map[string]func(string) error{
		"cache_read":     func(v string) error { return setFloat(&p.CacheRead, v) },
		"cache_write":    func(v string) error { return setFloat(&p.CacheWrite, v) },
		"cache_write_1h": func(v string) error { return setFloat(&p.CacheWrite1h, v) },
		"min_prefix":     func(v string) error { return setInt(&p.MinPrefix, v, 0) },
		"granularity":    func(v string) error { return setInt(&p.Granularity, v, 1) },
		"input_price":    func(v string) error { return setPositiveFloat(&p.InputPrice, v) },
		"ttl": func(v string) error {
			var dur caddy.Duration
			if err := setDuration(&dur, v); err != nil {
				return err
			}
			p.TTL = &dur
			return nil
		},
	}
	seen := make(map[string]bool)
	for d.NextBlock(0) {
		name := d.Val()
		set, known := setters[name]
		if !known {
			return d.Errf("unrecognized cost_prices subdirective '%s'", name)
		}
		if err := oneArg(d, "cost_prices "+family+" "+name, seen, set); err != nil {
			return err
		}
	}
	if t.CostPrices == nil {
		t.CostPrices = map[string]CostPrices{}
	}
	t.CostPrices[family] = p
	return nil
}

func setFloat(dst **float64, v string) error {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("not a number: '%s'", v)
	}
	*dst = &f
	return nil
}

func setPositiveFloat(dst **float64, v string) error {
	if err := setFloat(dst, v); err != nil {
		return err
	}
	if **dst <= 0 {
		return fmt.Errorf("must be positive, got '%s'", v)
	}
	return nil
}
