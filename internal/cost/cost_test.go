package cost

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func ptr[T any](v T) *T { return &v }

func TestModelTable(t *testing.T) {
	var c Config
	tests := []struct {
		format      provider.Format
		model       string
		family      Family
		read, write float64
		gran        int
	}{
		{"anthropic_messages", "claude-sonnet-4-20250514", Anthropic, 0.1, 1.25, 1},
		{"openai_chat", "gpt-5-2025-08-07", OpenAI, 0.1, 1, 128},
		{"openai_responses", "gpt-4.1-mini", OpenAI, 0.25, 1, 128},
		{"openai_chat", "gpt-4o", OpenAI, 0.5, 1, 128},
		{"openai_chat", "o3", OpenAI, 0.25, 1, 128},
		{"openai_chat", "accounts/fireworks/models/kimi-k2", Other, 0.1, 1, 128},
	}
	for _, tt := range tests {
		m := c.Model(tt.format, tt.model)
		if m.Family != tt.family || !near(m.CacheRead, tt.read) || !near(m.CacheWrite, tt.write) || m.Granularity != tt.gran {
			t.Errorf("%s %s: %+v", tt.format, tt.model, m)
		}
	}
	if m := c.Model("anthropic_messages", "claude"); m.CacheWrite1h != 2 || m.TTL != 5*time.Minute || !m.Breakpoints ||
		m.MaxBreakpoints != 4 || m.Render[0] != PartTools || m.Render[2] != PartMessages {
		t.Errorf("anthropic: %+v", m)
	}
	o := Config{Anthropic: Overrides{CacheRead: ptr(0.2), TTL: ptr(time.Hour), MinPrefix: ptr(2048)}}
	if m := o.Model("anthropic_messages", "claude"); m.CacheRead != 0.2 || m.TTL != time.Hour || m.MinPrefix != 2048 || m.CacheWrite != 1.25 {
		t.Errorf("override: %+v", m)
	}
	// Overrides of one family leave the others alone.
	if m := o.Model("openai_chat", "gpt-5"); m.CacheRead != 0.1 || m.TTL != 5*time.Minute {
		t.Errorf("openai changed by an anthropic override: %+v", m)
	}
}

func TestValidateNamesTheValue(t *testing.T) {
	tests := []struct {
		c    Config
		want string
	}{
		{Config{BytesPerToken: -1}, "bytes_per_token"},
		{Config{MaxHorizon: -2}, "max_horizon"},
		{Config{OpenAI: Overrides{CacheRead: ptr(-0.5)}}, "cache_read -0.5"},
		{Config{OpenAI: Overrides{Granularity: ptr(0)}}, "granularity 0"},
		{Config{Anthropic: Overrides{TTL: ptr(time.Duration(0))}}, "ttl 0s"},
	}
	for _, tt := range tests {
		err := tt.c.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want it to name %q", tt.c, err, tt.want)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// Hand-computed prices: Anthropic 10000 tokens of which 8000 cached:
// 8000*0.1 + 2000*1.25 = 3300. OpenAI gpt-5, 10000 tokens, 8100 cached:
// 8064 (63 blocks of 128) read at 0.1, 1936 at 1 = 2742.4. Below the
// minimum prefix nothing is read.
func TestPrice(t *testing.T) {
	var c Config
	an, oa := c.Model("anthropic_messages", "claude-sonnet-4"), c.Model("openai_chat", "gpt-5")
	tests := []struct {
		m             Model
		total, cached float64
		want          float64
	}{
		{an, 10000, 8000, 3300},
		{an, 10000, 0, 12500},
		{an, 10000, 1000, 12500}, // below 1024: not cached
		{an.Uncached(), 10000, 8000, 10000},
		{oa, 10000, 8100, 8064*0.1 + 1936},
		{oa, 10000, 0, 10000},
		{oa, 1000, 1000, 1000}, // below 1024
	}
	for _, tt := range tests {
		if got := tt.m.Price(tt.total, tt.cached); !near(got, tt.want) {
			t.Errorf("%s Price(%v, %v) = %v, want %v", tt.m.Family, tt.total, tt.cached, got, tt.want)
		}
	}
}

// Charge prices tokens by how the provider billed them (hand-computed).
func TestCharge(t *testing.T) {
	var c Config
	an, oa := c.Model("anthropic_messages", "claude-sonnet-4"), c.Model("openai_chat", "gpt-4o")
	tests := []struct {
		m                               Model
		read, written, written1h, plain float64
		want                            float64
	}{
		{an, 1000, 400, 0, 50, 100 + 500 + 50},
		{an, 1000, 400, 100, 50, 100 + 300*1.25 + 100*2 + 50},
		{an, 0, 100, 500, 0, 200},          // the 1-hour part is at most what was written
		{oa, 1000, 400, 100, 0, 500 + 400}, // no 1-hour rate: at CacheWrite (1)
	}
	for _, tt := range tests {
		if got := tt.m.Charge(tt.read, tt.written, tt.written1h, tt.plain); !near(got, tt.want) {
			t.Errorf("%s Charge(%v, %v, %v, %v) = %v, want %v", tt.m.Family, tt.read, tt.written, tt.written1h, tt.plain, got, tt.want)
		}
	}
}

// The plan choice: a rewrite of a warm cached prefix must pay back within
// the horizon; on a cold cache the smallest plan wins.
func TestCheapest(t *testing.T) {
	var c Config
	an := c.Model("anthropic_messages", "claude")
	orig := Plan{Tokens: 100000, Cached: 95000}
	stable := Plan{Tokens: 90000, Cached: 85000}
	full := Plan{Tokens: 40000, Cached: 2000}
	// Warm, horizon 2: full costs 2000*0.1+38000*1.25+2*4000 = 55700; stable
	// 8500+6250+2*9000 = 32750; original 9500+6250+20000 = 35750.
	if got := an.Cheapest([]Plan{stable, full, orig}, 2); got != 0 {
		t.Errorf("warm, short horizon: chose %d, want the stable plan", got)
	}
	if got, want := an.Expected(full, 2), 55700.0; !near(got, want) {
		t.Errorf("Expected(full) = %v, want %v", got, want)
	}
	// Warm, horizon 8: full 47700+32000 = 79700 vs stable 14750+72000 = 86750.
	if got := an.Cheapest([]Plan{stable, full, orig}, 8); got != 1 {
		t.Errorf("warm, long horizon: chose %d, want the full plan", got)
	}
	// Cold: nothing cached, so the smallest plan is the cheapest now and later.
	cold := []Plan{{Tokens: 90000}, {Tokens: 40000}, {Tokens: 100000}}
	if got := an.Cheapest(cold, 1); got != 1 {
		t.Errorf("cold: chose %d", got)
	}
	if got := an.Cheapest(nil, 1); got != -1 {
		t.Errorf("no plans: %d", got)
	}
}

func TestHorizon(t *testing.T) {
	c := Config{MaxHorizon: 5}
	for before, want := range map[int]float64{0: 1, 1: 1, 3: 3, 5: 5, 40: 5} {
		if got := c.Horizon(before); got != want {
			t.Errorf("Horizon(%d) = %v, want %v", before, got, want)
		}
	}
	if got := (Config{}).Horizon(100); got != DefaultMaxHorizon {
		t.Errorf("default bound: %v", got)
	}
}

// Receipts pay back over at least DefaultReceiptHorizon requests, or the
// configured fold horizon when that is longer.
func TestReceiptHorizon(t *testing.T) {
	for _, tt := range []struct {
		c      Config
		before int
		want   float64
	}{
		{Config{}, 0, DefaultReceiptHorizon}, {Config{}, 100, DefaultReceiptHorizon},
		{Config{MaxHorizon: 12}, 3, DefaultReceiptHorizon}, {Config{MaxHorizon: 12}, 10, 10}, {Config{MaxHorizon: 12}, 40, 12},
	} {
		if got := tt.c.ReceiptHorizon(tt.before); got != tt.want {
			t.Errorf("%s ReceiptHorizon(%d) = %v, want %v", tt.c, tt.before, got, tt.want)
		}
	}
}

// String renders by value: equal configurations built from different
// pointers print the same, and any changed figure prints differently.
func TestConfigStringByValue(t *testing.T) {
	a := Config{MaxHorizon: 3, Anthropic: Overrides{CacheRead: ptr(0.2), TTL: ptr(time.Hour)}, Other: Overrides{MinPrefix: ptr(512)}}
	b := Config{MaxHorizon: 3, Anthropic: Overrides{CacheRead: ptr(0.2), TTL: ptr(time.Hour)}, Other: Overrides{MinPrefix: ptr(512)}}
	if a.String() != b.String() {
		t.Fatalf("equal configs print differently:\n%s\n%s", a, b)
	}
	if strings.Contains(a.String(), "0x") {
		t.Fatalf("config prints an address: %s", a)
	}
	variants := []Config{
		{MaxHorizon: 3, Anthropic: Overrides{CacheRead: ptr(0.25), TTL: ptr(time.Hour)}, Other: Overrides{MinPrefix: ptr(512)}},
		{MaxHorizon: 3, Anthropic: Overrides{CacheRead: ptr(0.2), TTL: ptr(time.Hour)}, OpenAI: Overrides{MinPrefix: ptr(512)}},
		{MaxHorizon: 3, Anthropic: Overrides{CacheRead: ptr(0.2)}, Other: Overrides{MinPrefix: ptr(512)}},
		{MaxHorizon: 2, Anthropic: Overrides{CacheRead: ptr(0.2), TTL: ptr(time.Hour)}, Other: Overrides{MinPrefix: ptr(512)}},
		{Off: true, MaxHorizon: 3, Anthropic: Overrides{CacheRead: ptr(0.2), TTL: ptr(time.Hour)}, Other: Overrides{MinPrefix: ptr(512)}},
		{BytesPerToken: 3.5, MaxHorizon: 3, Anthropic: Overrides{CacheRead: ptr(0.2), TTL: ptr(time.Hour)}, Other: Overrides{MinPrefix: ptr(512)}},
	}
	for i, v := range variants {
		if v.String() == a.String() {
			t.Errorf("variant %d prints like the original: %s", i, v)
		}
	}
	var c Config
	for _, f := range Families {
		if !c.SetOverrides(f, Overrides{Granularity: ptr(64)}) || c.overrides(f).Granularity == nil {
			t.Errorf("SetOverrides(%s) did not set", f)
		}
	}
	if c.SetOverrides("mistral", Overrides{}) {
		t.Error("SetOverrides accepted an unknown family")
	}
}
