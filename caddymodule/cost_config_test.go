package caddymodule

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
)

// The cost subdirectives parse into the handler's JSON; bad values are
// refused with the subdirective (and family) named.
func TestCostCaddyfile(t *testing.T) {
	tests := []struct {
		name, input string
		want        string // JSON of the parsed handler, when no error
		err         string
	}{
		{name: "scalars", input: "token_terminator {\ncost_model off\ncost_horizon 8\ncost_bytes_per_token 3.5\n}",
			want: `{"cost_model":false,"cost_horizon":8,"cost_bytes_per_token":3.5}`},
		{name: "two families", input: `token_terminator {
				cost_prices anthropic {
					cache_read 0.1
					cache_write 1.25
					cache_write_1h 2
					min_prefix 2048
					granularity 1
					ttl 1h
				}
				cost_prices other {
					cache_read 0.5
				}
				mode shadow
			}`,
			want: `{"mode":"shadow","cost_prices":{"anthropic":{"cache_read":0.1,"cache_write":1.25,"cache_write_1h":2,"min_prefix":2048,"granularity":1,"ttl":3600000000000},"other":{"cache_read":0.5}}}`},
		{name: "empty block", input: "token_terminator {\ncost_prices openai {\n}\n}", want: `{"cost_prices":{"openai":{}}}`},
		{name: "bad switch", input: "token_terminator {\ncost_model maybe\n}", err: "cost_model: want on or off, got 'maybe'"},
		{name: "zero horizon", input: "token_terminator {\ncost_horizon 0\n}", err: "cost_horizon: must be at least 1, got 0"},
		{name: "lease min", input: "token_terminator {\ncost_lease_min_chars 1500\n}", want: `{"cost_lease_min_chars":1500}`},
		{name: "zero lease min", input: "token_terminator {\ncost_lease_min_chars 0\n}", err: "cost_lease_min_chars: must be at least 1, got 0"},
		{name: "negative bytes per token", input: "token_terminator {\ncost_bytes_per_token -1\n}", err: "cost_bytes_per_token: must be positive, got '-1'"},
		{name: "bytes per token not a number", input: "token_terminator {\ncost_bytes_per_token four\n}", err: "cost_bytes_per_token: not a number: 'four'"},
		{name: "unknown family", input: "token_terminator {\ncost_prices mistral {\ncache_read 0.1\n}\n}", err: "unknown family 'mistral' (want anthropic, openai, other, gemini)"},
		{name: "no family", input: "token_terminator {\ncost_prices\n}", err: "cost_prices needs a family"},
		{name: "two families on one line", input: "token_terminator {\ncost_prices openai other {\n}\n}", err: "got extra 'other'"},
		{name: "family twice", input: "token_terminator {\ncost_prices openai {\n}\ncost_prices openai {\n}\n}", err: "duplicate cost_prices 'openai'"},
		{name: "figure twice", input: "token_terminator {\ncost_prices openai {\ncache_read 0.1\ncache_read 0.2\n}\n}", err: "duplicate subdirective 'cost_prices openai cache_read'"},
		{name: "unknown figure", input: "token_terminator {\ncost_prices openai {\ncache_hit 0.1\n}\n}", err: "unrecognized cost_prices subdirective 'cache_hit'"},
		{name: "read out of range", input: "token_terminator {\ncost_prices anthropic {\ncache_read 11\n}\n}", err: "cost: anthropic cache_read 11 is outside [0, 10]"},
		{name: "read not a number", input: "token_terminator {\ncost_prices anthropic {\ncache_read NaN\n}\n}", err: "cost_prices anthropic cache_read: not a number: 'NaN'"},
		{name: "zero granularity", input: "token_terminator {\ncost_prices openai {\ngranularity 0\n}\n}", err: "cost_prices openai granularity: must be at least 1, got 0"},
		{name: "negative min prefix", input: "token_terminator {\ncost_prices openai {\nmin_prefix -5\n}\n}", err: "cost_prices openai min_prefix: must be at least 0, got -5"},
		{name: "bad ttl", input: "token_terminator {\ncost_prices openai {\nttl soon\n}\n}", err: "cost_prices openai ttl: bad duration 'soon'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tt.input))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(&h)
			if string(got) != tt.want {
				t.Fatalf("JSON\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

// JSON config goes through the same checks (cost.Config.Validate for the
// figures), and a valid configuration reaches compiler.Options.Cost.
func TestCostSettingsMapping(t *testing.T) {
	tests := []struct {
		name, json string
		err        string
		check      func(cost.Config) bool
	}{
		{name: "defaults", json: `{}`, check: func(c cost.Config) bool { return c.String() == (cost.Config{}).String() }},
		{name: "off", json: `{"cost_model":false}`, check: func(c cost.Config) bool { return c.Off }},
		{name: "horizon and bytes", json: `{"cost_horizon":9,"cost_bytes_per_token":3}`,
			check: func(c cost.Config) bool { return c.MaxHorizon == 9 && c.BytesPerToken == 3 }},
		{name: "prices per family", json: `{"cost_prices":{"openai":{"cache_read":0.3,"ttl":"10m"},"anthropic":{"min_prefix":4096}}}`,
			check: func(c cost.Config) bool {
				m := c.Model("openai_chat", "gpt-5")
				a := c.Model("anthropic_messages", "claude-haiku-4-5")
				o := c.Model("openai_chat", "kimi")
				return m.CacheRead == 0.3 && m.TTL == 10*time.Minute && a.MinPrefix == 4096 && o.CacheRead == 0.1
			}},
		{name: "unknown family", json: `{"cost_prices":{"google":{}}}`, err: "cost_prices: unknown family 'google'"},
		{name: "write out of range", json: `{"cost_prices":{"other":{"cache_write":-1}}}`, err: "cost: other cache_write -1 is outside [0, 10]"},
		{name: "zero ttl", json: `{"cost_prices":{"anthropic":{"ttl":0}}}`, err: "cost: anthropic ttl 0s is not positive"},
		{name: "zero granularity", json: `{"cost_prices":{"openai":{"granularity":0}}}`, err: "cost: openai granularity 0 is below 1"},
		{name: "zero horizon", json: `{"cost_horizon":0}`, err: "cost_horizon must be at least 1, got 0"},
		{name: "lease min", json: `{"cost_lease_min_chars":3000}`, check: func(c cost.Config) bool { return c.LeaseMin() == 3000 }},
		{name: "lease min default", json: `{}`, check: func(c cost.Config) bool { return c.LeaseMin() == cost.DefaultLeaseMinChars }},
		{name: "zero lease min", json: `{"cost_lease_min_chars":0}`, err: "cost_lease_min_chars must be at least 1, got 0"},
		{name: "zero bytes per token", json: `{"cost_bytes_per_token":0}`, err: "cost_bytes_per_token must be positive, got 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Handler
			if err := json.Unmarshal([]byte(tt.json), &h); err != nil {
				t.Fatal(err)
			}
			err := h.Validate()
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Validate() = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			h.applyDefaults()
			if c := h.compilerOptions().Cost; !tt.check(c) {
				t.Fatalf("compiler cost config %s", c)
			}
		})
	}
}

// The compiler key is built from values: two handlers parsed separately
// with the same prices (different pointers) share one compiler, so a
// reload keeps its caches; different prices get their own.
func TestCostCompilerKeyByValue(t *testing.T) {
	app, ctx := newApp(t)
	dir := t.TempDir()
	parse := func(read string) *Handler {
		t.Helper()
		var h Handler
		in := "token_terminator {\nvault_dir " + dir + "\ncost_horizon 3\ncost_prices anthropic {\ncache_read " + read + "\nttl 1h\n}\n}"
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(in)); err != nil {
			t.Fatal(err)
		}
		return &h
	}
	hs := []*Handler{parse("0.2"), parse("0.2"), parse("0.3")}
	for _, h := range hs {
		if err := provisionHandler(t, app, ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	key := func(h *Handler) string {
		return compilerKey((&BadgerVault{Dir: dir}).VaultKey(), counterKey(tokensConfig(h)), h.compilerOptions())
	}
	if strings.Contains(key(hs[0]), "0xc") {
		t.Fatalf("compiler key holds an address: %s", key(hs[0]))
	}
	if !strings.Contains(key(hs[0]), "cache_read=0.2") {
		t.Fatalf("compiler key does not show the price: %s", key(hs[0]))
	}
	if n, _ := app.shared.compilers.References(key(hs[0])); n != 2 {
		t.Fatalf("compiler of equal prices has %d users, want 2", n)
	}
	if n, _ := app.shared.compilers.References(key(hs[2])); n != 1 {
		t.Fatalf("compiler of other prices has %d users, want 1", n)
	}
}
