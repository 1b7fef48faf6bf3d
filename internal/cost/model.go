package cost

import (
	"fmt"
	"strings"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// Family is a provider family: the pricing and caching rules its API
// follows.
type Family string

const (
	Anthropic Family = "anthropic" // Anthropic Messages
	OpenAI    Family = "openai"    // OpenAI Chat Completions and Responses
	// Other is an OpenAI-compatible provider of unknown caching rules
	// (Fireworks, Together, ...): priced as automatic prefix caching with
	// the deepest published discount, so a rewrite of a cached prefix is
	// never judged cheaper than it may be.
	Other Family = "other"
	// Gemini is the Gemini API (generateContent): implicit prefix caching
	// with no write fee and a discount on
	// usageMetadata.cachedContentTokenCount; explicit caches
	// (cachedContent) are a resource of their own the gateway leaves alone.
	Gemini Family = "gemini"
)

// Part is one piece of the prompt in the order the provider renders (and
// caches) it, which need not be the order of the body's keys.
type Part string

const (
	PartTools    Part = "tools"
	PartSystem   Part = "system" // Anthropic system, Responses instructions
	PartMessages Part = "messages"
)

// Model is what one provider family charges for input and how its prompt
// cache works.
type Model struct {
	Family Family
	// Multipliers of the base input price.
	CacheRead    float64 // a token read from the cache
	CacheWrite   float64 // a token written to the cache (5-minute TTL for Anthropic)
	CacheWrite1h float64 // a token written with a 1-hour TTL (Anthropic); 0 when not offered
	// MinPrefix is the smallest cacheable prefix in tokens: below it
	// nothing is cached, silently.
	MinPrefix int
	// Granularity is the block size in tokens a cache hit is counted in
	// (OpenAI matches in 128-token blocks); 1 for exact breakpoints.
	Granularity int
	// TTL is how long an unused cache entry survives (Anthropic refreshes
	// it on every read; OpenAI clears idle caches after 5-10 minutes).
	TTL, TTL1h time.Duration
	// Breakpoints: the provider caches only up to explicit cache_control
	// markers (Anthropic, at most MaxBreakpoints of them); otherwise
	// caching is automatic on every prefix.
	Breakpoints    bool
	MaxBreakpoints int
	// Render is the order the prompt is rendered and cached in.
	Render []Part
	// CacheKey names the request field that routes requests to the same
	// cache (OpenAI prompt_cache_key); empty when none.
	CacheKey string
}

// Sources of the figures below (checked 2026-12):
//
//   - Anthropic prompt caching: https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching
//     (cache key = exact prefix in the order tools, system, messages; up to
//     4 cache_control breakpoints; 5-minute TTL refreshed on use, optional
//     1 h; minimum cacheable prompt 1024 tokens for Sonnet/Opus 4, 2048 for
//     Haiku 3/3.5, 4096 for Haiku 4.5 and Opus 4.5).
//   - Anthropic pricing: https://docs.anthropic.com/en/docs/about-claude/pricing
//     (5-minute cache write 1.25x base input, 1-hour write 2x, cache read
//     0.1x).
//   - OpenAI prompt caching: https://platform.openai.com/docs/guides/prompt-caching
//     (= https://developers.openai.com/api/docs/guides/prompt-caching:
//     automatic for prompts of 1024 tokens or more, hits in 128-token
//     increments, routing by the first ~256 tokens plus prompt_cache_key,
//     no write fee, caches cleared after 5-10 minutes idle, at most 1 h).
//   - OpenAI pricing: https://openai.com/api/pricing/ (cached input: gpt-5
//     family 0.1x, gpt-4.1 and o3/o4-mini 0.25x, gpt-4o and o1 0.5x).
//
// The same figures are summarised in the team's provider-rules notes.
var defaults = map[Family]Model{
	Anthropic: {
		Family: Anthropic, CacheRead: 0.1, CacheWrite: 1.25, CacheWrite1h: 2,
		MinPrefix: 1024, Granularity: 1, TTL: 5 * time.Minute, TTL1h: time.Hour,
		Breakpoints: true, MaxBreakpoints: 4,
		Render: []Part{PartTools, PartSystem, PartMessages},
	},
	OpenAI: {
		Family: OpenAI, CacheRead: 0.1, CacheWrite: 1,
		MinPrefix: 1024, Granularity: 128, TTL: 5 * time.Minute,
		Render:   []Part{PartTools, PartSystem, PartMessages},
		CacheKey: "prompt_cache_key",
	},
	// Gemini implicit caching (https://ai.google.dev/gemini-api/docs/caching,
	// https://ai.google.dev/gemini-api/docs/pricing): automatic, by exact
	// prefix, minimum 1024 tokens (Flash) to 4096 (the largest models), no
	// write fee, cached input 0.25x on 2.5 models and 0.1x on 3 models; no
	// guarantee of a hit. The smallest minimum and the deepest discount
	// are the defaults: a rewrite of a cached prefix is never judged
	// cheaper than it may be.
	Gemini: {
		Family: Gemini, CacheRead: 0.1, CacheWrite: 1,
		MinPrefix: 1024, Granularity: 1, TTL: 5 * time.Minute,
		Render: []Part{PartTools, PartSystem, PartMessages},
	},
	Other: {
		Family: Other, CacheRead: 0.1, CacheWrite: 1,
		MinPrefix: 1024, Granularity: 128, TTL: 5 * time.Minute,
		Render: []Part{PartTools, PartSystem, PartMessages},
	},
}

// openAIRead is the cached-input multiplier of OpenAI models by name
// prefix (longest first); a model not listed gets the family's default.
var openAIRead = []struct {
	prefix string
	read   float64
}{
	{"gpt-4.1", 0.25},
	{"gpt-4o", 0.5},
	{"o4-mini", 0.25},
	{"o3", 0.25},
	{"o1", 0.5},
	{"gpt-5", 0.1},
}

// geminiRead is the cached-input multiplier of Gemini models by name
// prefix; a model not listed gets the family's default (the deepest).
var geminiRead = []struct {
	prefix string
	read   float64
}{
	{"gemini-2.5", 0.25},
	{"gemini-2.0", 0.25},
}

// FamilyOf returns the provider family of a request format and model
// (provider.VendorOf: the one model table).
func FamilyOf(format provider.Format, model string) Family {
	return Family(provider.VendorOf(format, model))
}

// Overrides replaces figures of one family's model; nil fields keep the
// default. The Caddyfile maps onto it.
type Overrides struct {
	CacheRead, CacheWrite, CacheWrite1h *float64
	MinPrefix, Granularity              *int
	TTL                                 *time.Duration
}

// Config is the cost model's configuration. The zero value is the
// published defaults.
type Config struct {
	// Off turns cost-based decisions off: the compiler then judges by
	// bytes and tokens only, as before.
	Off bool
	// BytesPerToken estimates tokens from bytes where no tokenizer counts
	// them; 0 means DefaultBytesPerToken.
	BytesPerToken float64
	// MaxHorizon bounds how many following requests a move of the fold
	// boundary may pay back over (receipts: ReceiptHorizon); 0 means
	// DefaultMaxHorizon.
	MaxHorizon int
	// LeaseMinChars is the smallest answered tool result (characters) a
	// lease may receipt when the decision finds that it pays back, below
	// the compiler's MinArtifactChars (from which results lease whatever
	// the cost); 0 means DefaultLeaseMinChars. Only with the model on.
	LeaseMinChars int
	// Overrides of each family's figures. Fields, not a map, so a
	// Config (and the compiler's Options holding it) stays comparable.
	Anthropic, OpenAI, Other Overrides
	Gemini                   Overrides
}

// overrides returns the overrides of a family.
func (c Config) overrides(f Family) Overrides {
	switch f {
	case Anthropic:
		return c.Anthropic
	case OpenAI:
		return c.OpenAI
	case Gemini:
		return c.Gemini
	}
	return c.Other
}

const (
	// DefaultBytesPerToken: JSON request bodies of agent sessions (code,
	// logs, escaped strings) measure 3.3-4.1 bytes per o200k token in the
	// corpus; 4 is the usual round figure and errs towards fewer tokens,
	// which the decision only uses as a common scale.
	DefaultBytesPerToken = 4.0
	// DefaultMaxHorizon: a rewrite of the cached prefix must pay back
	// within at most this many following requests. Sessions end without
	// notice (the corpus's real ones after 14-36 requests, a generated one
	// right after a fold), so the bound is short: with cache reads at 0.1x
	// only a rewrite that removes most of the prompt pays back that fast;
	// the rest waits for a cold cache, where it costs nothing extra.
	DefaultMaxHorizon = 4
	// DefaultReceiptHorizon: the horizon of leases and duplicates (see
	// ReceiptHorizon). Receipts stay for the rest of a conversation, so
	// they are judged over more requests than folds: a short horizon
	// declines early receipts that pay back a few requests later, while
	// folds at this horizon would cost more than no compaction (their
	// boundary moves again every few turns).
	DefaultReceiptHorizon = 8
	// DefaultLeaseMinChars: a receipt with its recovery hint is 200-300
	// bytes; from about 2000 characters a result's receipt saves most of
	// it on every following request, and an agent's short outputs (a
	// command's status, a small diff) stay inline, where the model reads
	// them without a recovery round.
	DefaultLeaseMinChars = 2000
)

// Validate reports a configuration value that makes no sense, naming it.
func (c Config) Validate() error {
	if c.BytesPerToken < 0 {
		return fmt.Errorf("cost: bytes_per_token %v is negative", c.BytesPerToken)
	}
	if c.LeaseMinChars < 0 {
		return fmt.Errorf("cost: lease_min_chars %d is negative", c.LeaseMinChars)
	}
	if c.MaxHorizon < 0 {
		return fmt.Errorf("cost: max_horizon %d is negative", c.MaxHorizon)
	}
	for _, f := range []Family{Anthropic, OpenAI, Other, Gemini} {
		o := c.overrides(f)
		for name, v := range map[string]*float64{"cache_read": o.CacheRead, "cache_write": o.CacheWrite, "cache_write_1h": o.CacheWrite1h} {
			if v != nil && (*v < 0 || *v > 10) {
				return fmt.Errorf("cost: %s %s %v is outside [0, 10]", f, name, *v)
			}
		}
		if o.MinPrefix != nil && *o.MinPrefix < 0 {
			return fmt.Errorf("cost: %s min_prefix %d is negative", f, *o.MinPrefix)
		}
		if o.Granularity != nil && *o.Granularity < 1 {
			return fmt.Errorf("cost: %s granularity %d is below 1", f, *o.Granularity)
		}
		if o.TTL != nil && *o.TTL <= 0 {
			return fmt.Errorf("cost: %s ttl %v is not positive", f, *o.TTL)
		}
	}
	return nil
}

// LeaseMin is the smallest tool result (characters) a lease priced by the
// decision may receipt.
func (c Config) LeaseMin() int {
	if c.LeaseMinChars <= 0 {
		return DefaultLeaseMinChars
	}
	return c.LeaseMinChars
}

// Tokens estimates the tokens of n bytes.
func (c Config) Tokens(n int) float64 {
	bpt := c.BytesPerToken
	if bpt <= 0 {
		bpt = DefaultBytesPerToken
	}
	return float64(n) / bpt
}

// Horizon is the expected number of requests that follow this one in its
// conversation: as many as came before it (a conversation that has lasted
// n requests is, by the usual estimate, halfway through), at least 1, at
// most MaxHorizon.
func (c Config) Horizon(before int) float64 {
	m := c.MaxHorizon
	if m <= 0 {
		m = DefaultMaxHorizon
	}
	return float64(min(max(before, 1), m))
}

// ReceiptHorizon is the horizon of a plan that moves no fold boundary:
// its receipts stay for the rest of the conversation (a fold boundary
// moves again a few turns later and rewrites the prompt once more), and an
// agent session that has begun runs on for many more requests (the
// corpus's real ones 14-36), so it is at least DefaultReceiptHorizon.
func (c Config) ReceiptHorizon(before int) float64 {
	return max(c.Horizon(before), DefaultReceiptHorizon)
}

// Model returns the cost model of a request format and model name, with the
// configured overrides applied.
func (c Config) Model(format provider.Format, model string) Model {
	f := FamilyOf(format, model)
	m := defaults[f]
	m.Render = append([]Part(nil), m.Render...)
	if f == Gemini {
		for _, e := range geminiRead {
			if strings.HasPrefix(model, e.prefix) {
				m.CacheRead = e.read
				break
			}
		}
	}
	if f == OpenAI {
		for _, e := range openAIRead {
			if strings.HasPrefix(model, e.prefix) {
				m.CacheRead = e.read
				break
			}
		}
	}
	o := c.overrides(f)
	if o.CacheRead != nil {
		m.CacheRead = *o.CacheRead
	}
	if o.CacheWrite != nil {
		m.CacheWrite = *o.CacheWrite
	}
	if o.CacheWrite1h != nil {
		m.CacheWrite1h = *o.CacheWrite1h
	}
	if o.MinPrefix != nil {
		m.MinPrefix = *o.MinPrefix
	}
	if o.Granularity != nil {
		m.Granularity = *o.Granularity
	}
	if o.TTL != nil {
		m.TTL = *o.TTL
	}
	return m
}
