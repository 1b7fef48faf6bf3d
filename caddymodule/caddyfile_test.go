package caddymodule

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
)

func TestUnmarshalCaddyfile(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  string // JSON of the parsed handler; "" when an error is expected
		err   string // substring of the expected error
	}{
		{name: "bare directive", input: `token_terminator`, want: `{}`},
		{name: "empty block", input: "token_terminator {\n}", want: `{}`},
		{
			name: "every subdirective",
			input: `token_terminator {
				vault_dir /var/lib/tt
				min_artifact_chars 9000
				max_artifact_chars 100000
				vault_max_bytes 1GiB
				inline_leases 2
				max_body_size 16MB
				mode shadow
				session {http.request.header.X-Session-Id}
				tokenizer o200k_base
				token_budget 100ms
				token_cache_size 8MiB
				context_compaction off
				context_min_vault_chars 500
				collapse_after_turns 8
				inline_recent_turns 3
				compile_timeout 1s
			}`,
			want: `{"vault_dir":"/var/lib/tt","min_artifact_chars":9000,"max_artifact_chars":100000,` +
				`"vault_max_bytes":1073741824,"inline_leases":2,"max_body_size":16000000,"mode":"shadow",` +
				`"session":"{http.request.header.X-Session-Id}","tokenizer":"o200k_base","token_budget":100000000,` +
				`"token_cache_size":8388608,"context_compaction":false,"context_min_vault_chars":500,` +
				`"collapse_after_turns":8,"inline_recent_turns":3,"compile_timeout":1000000000}`,
		},
		{name: "inline_leases 0 is kept", input: "token_terminator {\ninline_leases 0\n}", want: `{"inline_leases":0}`},
		{name: "turn counts 0 are kept", input: "token_terminator {\ncollapse_after_turns 0\ninline_recent_turns 0\n}", want: `{"collapse_after_turns":0,"inline_recent_turns":0}`},
		{name: "collapse 0 with recent 9", input: "token_terminator {\ncollapse_after_turns 0\ninline_recent_turns 9\n}", want: `{"collapse_after_turns":0,"inline_recent_turns":9}`},
		{name: "collapse equal to recent", input: "token_terminator {\ncollapse_after_turns 5\ninline_recent_turns 5\n}", want: `{"collapse_after_turns":5,"inline_recent_turns":5}`},
		{name: "context_compaction on", input: "token_terminator {\ncontext_compaction on\n}", want: `{"context_compaction":true}`},
		{name: "mode enforce", input: "token_terminator {\nmode enforce\n}", want: `{"mode":"enforce"}`},
		{name: "mode off", input: "token_terminator {\nmode off\n}", want: `{"mode":"off"}`},
		{name: "tokenizer off", input: "token_terminator {\ntokenizer off\n}", want: `{"tokenizer":"off"}`},
		{name: "tokenizer cl100k", input: "token_terminator {\ntokenizer cl100k_base\n}", want: `{"tokenizer":"cl100k_base"}`},
		{name: "size plain bytes", input: "token_terminator {\nmax_body_size 1048576\n}", want: `{"max_body_size":1048576}`},
		{name: "max_buffered_bytes", input: "token_terminator {\nmax_buffered_bytes 64MiB\n}", want: `{"max_buffered_bytes":67108864}`},
		{name: "max_concurrent_compiles", input: "token_terminator {\nmax_concurrent_compiles 8\n}", want: `{"max_concurrent_compiles":8}`},
		{name: "size MiB", input: "token_terminator {\nvault_max_bytes 512MiB\n}", want: `{"vault_max_bytes":536870912}`},
		{name: "duration days", input: "token_terminator {\ncompile_timeout 1d\n}", want: `{"compile_timeout":86400000000000}`},
		{name: "min equals max", input: "token_terminator {\nmin_artifact_chars 10\nmax_artifact_chars 10\n}", want: `{"min_artifact_chars":10,"max_artifact_chars":10}`},

		{name: "vault badger block", input: "token_terminator {\nvault badger {\ndir /var/lib/tt\nmax_bytes 1GiB\n}\n}",
			want: `{"vault":{"backend":"badger","dir":"/var/lib/tt","max_bytes":1073741824}}`},
		{name: "vault badger no block", input: "token_terminator {\nvault badger\n}", want: `{"vault":{"backend":"badger"}}`},
		{name: "vault badger quota and damage", input: "token_terminator {\nvault badger {\nmax_bytes 1GiB\ntenant_max_bytes 256MiB\nmove_aside_damaged on\n}\n}",
			want: `{"vault":{"backend":"badger","max_bytes":1073741824,"move_aside_damaged":true,"tenant_max_bytes":268435456}}`},
		{name: "bad badger move_aside_damaged", input: "token_terminator {\nvault badger {\nmove_aside_damaged yes\n}\n}", err: "want on or off, got 'yes'"},
		{name: "tenant_key and tenant", input: "token_terminator {\ntenant_key {env.TT_TENANT_KEY}\ntenant {http.auth.user.id}\n}",
			want: `{"tenant_key":"{env.TT_TENANT_KEY}","tenant":"{http.auth.user.id}"}`},

		{name: "body_read_timeout", input: "token_terminator {\nbody_read_timeout 5s\n}", want: `{"body_read_timeout":5000000000}`},

		// refusals
		{name: "zero body_read_timeout", input: "token_terminator {\nbody_read_timeout 0s\n}", err: "body_read_timeout: duration must be positive"},
		{name: "vault block with vault_dir", input: "token_terminator {\nvault_dir /a\nvault badger {\ndir /b\n}\n}", err: "vault_dir cannot be combined with a vault block"},
		{name: "vault block with vault_max_bytes", input: "token_terminator {\nvault badger\nvault_max_bytes 1GiB\n}", err: "vault_max_bytes cannot be combined with a vault block"},
		{name: "vault without backend", input: "token_terminator {\nvault\n}", err: "vault needs a backend name"},
		{name: "unknown vault backend", input: "token_terminator {\nvault s3 {\n}\n}", err: "unknown vault backend 's3'"},
		{name: "two vault blocks", input: "token_terminator {\nvault badger\nvault badger\n}", err: "duplicate subdirective 'vault'"},
		{name: "unknown badger subdirective", input: "token_terminator {\nvault badger {\nsize 1\n}\n}", err: "unrecognized vault badger subdirective 'size'"},
		{name: "bad badger max_bytes", input: "token_terminator {\nvault badger {\nmax_bytes lots\n}\n}", err: "max_bytes: bad size 'lots'"},
		{name: "badger inline argument", input: "token_terminator {\nvault badger /dir\n}", err: "vault badger takes no inline arguments (got '/dir')"},
		{name: "unknown subdirective", input: "token_terminator {\nvault_size 1\n}", err: "unrecognized subdirective 'vault_size'"},
		{name: "repeated subdirective", input: "token_terminator {\nmode shadow\nmode enforce\n}", err: "duplicate subdirective 'mode'"},
		{name: "repeated vault_dir", input: "token_terminator {\nvault_dir /a\nvault_dir /b\n}", err: "duplicate subdirective 'vault_dir'"},
		{name: "inline argument", input: "token_terminator shadow", err: "no inline arguments"},
		{name: "missing argument", input: "token_terminator {\nmin_artifact_chars\n}", err: "min_artifact_chars"},
		{name: "missing argument vault_dir", input: "token_terminator {\nvault_dir\n}", err: "vault_dir"},
		{name: "extra argument", input: "token_terminator {\nmode shadow enforce\n}", err: "mode takes exactly one argument"},
		{name: "extra argument session", input: "token_terminator {\nsession a b\n}", err: "session takes exactly one argument"},
		{name: "sub-block", input: "token_terminator {\nmode shadow {\nx\n}\n}", err: "mode takes no block"},
		{name: "negative min", input: "token_terminator {\nmin_artifact_chars -1\n}", err: "min_artifact_chars: must be at least 1"},
		{name: "zero min", input: "token_terminator {\nmin_artifact_chars 0\n}", err: "min_artifact_chars: must be at least 1"},
		{name: "non-integer min", input: "token_terminator {\nmin_artifact_chars 8k\n}", err: "min_artifact_chars: not an integer"},
		{name: "negative max", input: "token_terminator {\nmax_artifact_chars -5\n}", err: "max_artifact_chars"},
		{name: "min above max", input: "token_terminator {\nmin_artifact_chars 9000\nmax_artifact_chars 100\n}", err: "min_artifact_chars (9000) must not exceed max_artifact_chars (100)"},
		{name: "min above default max", input: "token_terminator {\nmin_artifact_chars 3000000\n}", err: "min_artifact_chars (3000000) must not exceed max_artifact_chars (2000000)"},
		{name: "negative inline_leases", input: "token_terminator {\ninline_leases -1\n}", err: "inline_leases: must be at least 0"},
		{name: "bad vault_max_bytes", input: "token_terminator {\nvault_max_bytes lots\n}", err: "vault_max_bytes: bad size"},
		{name: "zero vault_max_bytes", input: "token_terminator {\nvault_max_bytes 0\n}", err: "vault_max_bytes: size must be positive"},
		{name: "negative max_body_size", input: "token_terminator {\nmax_body_size -1MB\n}", err: "max_body_size"},
		{name: "bad token_cache_size", input: "token_terminator {\ntoken_cache_size 12XB\n}", err: "token_cache_size: bad size"},
		{name: "unknown mode", input: "token_terminator {\nmode loud\n}", err: "mode: want enforce, shadow or off, got 'loud'"},
		{name: "unknown tokenizer", input: "token_terminator {\ntokenizer p50k_base\n}", err: "tokenizer: want auto, o200k_base, cl100k_base or off, got 'p50k_base'"},
		{name: "bad token_budget", input: "token_terminator {\ntoken_budget soon\n}", err: "token_budget: bad duration"},
		{name: "zero token_budget", input: "token_terminator {\ntoken_budget 0s\n}", err: "token_budget: duration must be positive"},
		{name: "zero max_concurrent_compiles", input: "token_terminator {\nmax_concurrent_compiles 0\n}", err: "max_concurrent_compiles: must be at least 1, got 0"},
		{name: "negative compile_timeout", input: "token_terminator {\ncompile_timeout -1s\n}", err: "compile_timeout: duration must be positive"},
		{name: "bad context_compaction", input: "token_terminator {\ncontext_compaction yes\n}", err: "context_compaction: want on or off, got 'yes'"},
		{name: "context_min_vault_chars below 500", input: "token_terminator {\ncontext_min_vault_chars 499\n}", err: "context_min_vault_chars: must be at least 500, got 499"},
		{name: "negative collapse_after_turns", input: "token_terminator {\ncollapse_after_turns -1\n}", err: "collapse_after_turns: must be at least 0"},
		{name: "negative inline_recent_turns", input: "token_terminator {\ninline_recent_turns -2\n}", err: "inline_recent_turns: must be at least 0"},
		{name: "compaction invariant", input: "token_terminator {\ncollapse_after_turns 3\ninline_recent_turns 5\n}", err: "collapse_after_turns (3) must be 0 or at least inline_recent_turns (5)"},
		{name: "compaction invariant with default recent", input: "token_terminator {\ncollapse_after_turns 4\n}", err: "collapse_after_turns (4) must be 0 or at least inline_recent_turns (5)"},
		{name: "compaction invariant with default collapse", input: "token_terminator {\ninline_recent_turns 7\n}", err: "collapse_after_turns (6) must be 0 or at least inline_recent_turns (7)"},
		{name: "working_state_chars", input: "token_terminator {\nworking_state_chars 2000\n}", want: `{"working_state_chars":2000}`},
		{name: "working_state_chars 0 is off", input: "token_terminator {\nworking_state_chars 0\n}", want: `{}`},
		{name: "working_state_chars too small", input: "token_terminator {\nworking_state_chars 100\n}", err: "working_state_chars must be 0 (off) or between 512 and 65536, got 100"},
		{name: "working_state_chars too large", input: "token_terminator {\nworking_state_chars 70000\n}", err: "working_state_chars must be 0 (off) or between 512 and 65536, got 70000"},
		{name: "negative working_state_chars", input: "token_terminator {\nworking_state_chars -1\n}", err: "working_state_chars: must be at least 0, got -1"},
		{name: "bad working_state_chars", input: "token_terminator {\nworking_state_chars lots\n}", err: "working_state_chars: not an integer: 'lots'"},
		{name: "reinline_recovered on", input: "token_terminator {\nreinline_recovered on\n}", want: `{"reinline_recovered":"on"}`},
		{name: "reinline_recovered cost", input: "token_terminator {\nreinline_recovered cost\n}", want: `{"reinline_recovered":"cost"}`},
		{name: "reinline_recovered off", input: "token_terminator {\nreinline_recovered off\n}", want: `{"reinline_recovered":"off"}`},
		{name: "bad reinline_recovered", input: "token_terminator {\nreinline_recovered always\n}", err: "reinline_recovered: want on, cost or off, got 'always'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tt.input))
			if tt.err != "" {
				if err == nil {
					t.Fatalf("expected error containing %q, got none", tt.err)
				}
				if !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %q does not contain %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			got, err := json.Marshal(&h)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", "/xdg")
	var h Handler
	h.applyDefaults()
	if want := filepath.Join("/xdg", "caddy", "token-terminator"); h.VaultDir != want {
		t.Errorf("vault_dir = %q, want %q", h.VaultDir, want)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"min_artifact_chars", *h.MinArtifactChars, 8000},
		{"max_artifact_chars", *h.MaxArtifactChars, 2000000},
		{"vault_max_bytes", *h.VaultMaxBytes, int64(512 << 20)},
		{"inline_leases", *h.InlineLeases, 1},
		{"max_body_size", *h.MaxBodySize, int64(32 << 20)},
		{"mode", h.Mode, "enforce"},
		{"session", h.Session, ""},
		{"tokenizer", h.Tokenizer, "auto"},
		{"token_budget", time.Duration(h.TokenBudget), 250 * time.Millisecond},
		{"token_cache_size", *h.TokenCacheSize, int64(64 << 20)},
		{"context_compaction", *h.ContextCompaction, true},
		{"context_min_vault_chars", *h.ContextMinVaultChars, 4000},
		{"collapse_after_turns", *h.CollapseAfterTurns, 6},
		{"inline_recent_turns", *h.InlineRecentTurns, 5},
		{"compile_timeout", time.Duration(h.CompileTimeout), 2 * time.Second},
		{"max_concurrent_compiles", *h.MaxConcurrentCompiles, runtime.GOMAXPROCS(0)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if err := h.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}

	opts := h.compilerOptions()
	want := compiler.Options{
		MinArtifactChars: 8000, MaxArtifactChars: 2000000, InlineLeases: 1, Timeout: 2 * time.Second,
		Compaction: compiler.Compaction{Enabled: true, MinVaultChars: 4000, CollapseAfterTurns: 6, InlineRecentTurns: 5},
		WorkAhead:  true,
	}
	if !reflect.DeepEqual(opts, want) {
		t.Errorf("compiler options = %+v, want %+v", opts, want)
	}
}

// Explicit zeros must survive the defaults and reach the compiler.
func TestExplicitZerosReachCompiler(t *testing.T) {
	var h Handler
	if err := json.Unmarshal([]byte(`{"inline_leases":0,"collapse_after_turns":0,"inline_recent_turns":0,"context_compaction":false}`), &h); err != nil {
		t.Fatal(err)
	}
	h.applyDefaults()
	opts := h.compilerOptions()
	if opts.InlineLeases != 0 || opts.Compaction.CollapseAfterTurns != 0 || opts.Compaction.InlineRecentTurns != 0 || opts.Compaction.Enabled {
		t.Fatalf("explicit zeros lost: %+v", opts)
	}
}

// Validate must refuse bad JSON configs, which never pass the Caddyfile
// parser.
func TestValidateJSON(t *testing.T) {
	tests := []struct {
		json string
		err  string // "" = valid
	}{
		{`{}`, ""},
		{`{"inline_leases":0,"collapse_after_turns":0,"inline_recent_turns":0}`, ""},
		{`{"min_artifact_chars":-1}`, "min_artifact_chars"},
		{`{"min_artifact_chars":0}`, "min_artifact_chars"},
		{`{"max_artifact_chars":0}`, "max_artifact_chars"},
		{`{"min_artifact_chars":10,"max_artifact_chars":5}`, "min_artifact_chars (10) must not exceed max_artifact_chars (5)"},
		{`{"vault_max_bytes":-1}`, "vault_max_bytes"},
		{`{"vault_max_bytes":0}`, "vault_max_bytes"},
		{`{"inline_leases":-1}`, "inline_leases"},
		{`{"max_body_size":0}`, "max_body_size"},
		{`{"max_buffered_bytes":0}`, "max_buffered_bytes"},
		{`{"max_concurrent_compiles":0}`, "max_concurrent_compiles must be at least 1, got 0"},
		{`{"max_concurrent_compiles":-3}`, "max_concurrent_compiles must be at least 1, got -3"},
		{`{"max_body_size":9223372036854775807}`, "max_body_size"},
		{`{"mode":"loud"}`, "mode"},
		{`{"tokenizer":"gpt2"}`, "tokenizer"},
		{`{"token_budget":-5}`, "token_budget"},
		{`{"token_budget":"-1s"}`, "token_budget"},
		{`{"token_cache_size":0}`, "token_cache_size"},
		{`{"context_min_vault_chars":100}`, "context_min_vault_chars"},
		{`{"collapse_after_turns":-1}`, "collapse_after_turns"},
		{`{"inline_recent_turns":-1}`, "inline_recent_turns"},
		{`{"collapse_after_turns":2,"inline_recent_turns":3}`, "collapse_after_turns (2) must be 0 or at least inline_recent_turns (3)"},
		{`{"compile_timeout":"-2s"}`, "compile_timeout"},
		{`{"body_read_timeout":"-2s"}`, "body_read_timeout"},
		{`{"vault_dir":"   "}`, "vault_dir"},
		{`{"vault":{"backend":"badger"},"vault_dir":"/x"}`, "vault_dir cannot be combined with a vault block"},
		{`{"vault":{"backend":"badger"},"vault_max_bytes":5}`, "vault_max_bytes cannot be combined with a vault block"},
		{`{"vault":{"backend":"badger","dir":"/x"}}`, ""},
		{`{"working_state_chars":512}`, ""},
		{`{"working_state_chars":511}`, "working_state_chars must be 0 (off) or between 512 and 65536, got 511"},
		{`{"working_state_chars":-5}`, "working_state_chars must be 0 (off) or between 512 and 65536, got -5"},
		{`{"reinline_recovered":"cost"}`, ""},
		{`{"reinline_recovered":"On"}`, `reinline_recovered must be on, cost or off, got "On"`},
	}
	for _, tt := range tests {
		t.Run(tt.json, func(t *testing.T) {
			var h Handler
			if err := json.Unmarshal([]byte(tt.json), &h); err != nil {
				t.Fatal(err)
			}
			err := h.Validate()
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.err != "" && err == nil:
				t.Fatalf("expected error containing %q", tt.err)
			case tt.err != "" && !strings.Contains(err.Error(), tt.err):
				t.Fatalf("error %q does not contain %q", err, tt.err)
			}
			// Validate must not fill the handler's own fields.
			if tt.json == `{}` && h.MinArtifactChars != nil {
				t.Fatal("Validate modified the handler")
			}
		})
	}
}

func TestModuleInfo(t *testing.T) {
	mi := Handler{}.CaddyModule()
	if mi.ID != "http.handlers.token_terminator" {
		t.Fatalf("module ID %q", mi.ID)
	}
	if _, ok := mi.New().(*Handler); !ok {
		t.Fatal("New does not return *Handler")
	}
	if _, err := caddy.GetModule("http.handlers.token_terminator"); err != nil {
		t.Fatal(err)
	}
}

// working_state_chars reaches the compiler (0, the default, is off).
func TestWorkingStateReachesCompiler(t *testing.T) {
	for _, tt := range []struct {
		json string
		want int
	}{{`{}`, 0}, {`{"working_state_chars":2000}`, 2000}} {
		var h Handler
		if err := json.Unmarshal([]byte(tt.json), &h); err != nil {
			t.Fatal(err)
		}
		h.applyDefaults()
		if got := h.compilerOptions().WorkingStateChars; got != tt.want {
			t.Errorf("%s: compiler WorkingStateChars %d, want %d", tt.json, got, tt.want)
		}
	}
}

// reinline_recovered reaches the compiler ("" is the compiler's default, on).
func TestReinlineRecoveredReachesCompiler(t *testing.T) {
	for _, tt := range []struct{ json, want string }{
		{`{}`, ""}, {`{"reinline_recovered":"cost"}`, "cost"}, {`{"reinline_recovered":"off"}`, "off"},
	} {
		var h Handler
		if err := json.Unmarshal([]byte(tt.json), &h); err != nil {
			t.Fatal(err)
		}
		h.applyDefaults()
		if got := h.compilerOptions().ReinlineRecovered; got != tt.want {
			t.Errorf("%s: compiler ReinlineRecovered %q, want %q", tt.json, got, tt.want)
		}
	}
}
