package caddymodule

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/gateway"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/badgervault"
)

func TestRecoveryCaddyfile(t *testing.T) {
	tests := []struct {
		name, input, want, err string
	}{
		{name: "every recovery subdirective", input: "token_terminator {\nrecovery api\nrecovery_path /tt/\nmax_recovery_rounds 5\nmax_recovery_calls 4\nmax_page_chars 100\nmax_search_results 7\n}",
			want: `{"recovery":"api","recovery_path":"/tt/","max_recovery_rounds":5,"max_recovery_calls":4,"max_page_chars":100,"max_search_results":7}`},
		{name: "zero calls", input: "token_terminator {\nmax_recovery_calls 0\n}", err: "max_recovery_calls: must be at least 1, got 0"},
		{name: "recovery off", input: "token_terminator {\nrecovery off\n}", want: `{"recovery":"off"}`},
		{name: "recovery tool", input: "token_terminator {\nrecovery tool\n}", want: `{"recovery":"tool"}`},
		{name: "unknown recovery", input: "token_terminator {\nrecovery maybe\n}", err: "recovery: want tool, api or off, got 'maybe'"},
		{name: "zero rounds", input: "token_terminator {\nmax_recovery_rounds 0\n}", err: "max_recovery_rounds: must be at least 1, got 0"},
		{name: "zero page", input: "token_terminator {\nmax_page_chars 0\n}", err: "max_page_chars: must be at least 1, got 0"},
		{name: "bad results", input: "token_terminator {\nmax_search_results many\n}", err: "max_search_results: not an integer: 'many'"},
		{name: "relative path", input: "token_terminator {\nrecovery_path tt/\n}", err: `recovery_path must be a path starting with '/', got "tt/"`},
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
				t.Fatalf("got %s\nwant %s", got, tt.want)
			}
		})
	}
	// JSON configuration is checked the same way.
	h := Handler{RecoveryConfig: RecoveryConfig{Recovery: "loud"}}
	if err := h.Validate(); err == nil || !strings.Contains(err.Error(), `"loud"`) {
		t.Fatalf("Validate: %v", err)
	}
}

// noArtifacts is a backend without Resolve and Search (the methods of
// *badgervault.Store are not promoted through the interface).
type noArtifacts struct{ vault.Backend }

// The effective recovery follows the mode and the backend: tool offers the
// definitions and names the tool in receipts, api names the path, off and
// a backend that cannot resolve artifacts offer nothing (logged).
func TestRecoveryProvision(t *testing.T) {
	store, err := badgervault.Open(badgervault.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, tc := range []struct {
		mode    string
		backend vault.Backend
		hint    string
		tool    bool
		logged  bool
	}{
		{RecoveryTool, store, "token_terminator artifact_get", true, false},
		{RecoveryAPI, store, "GET /token-terminator/artifacts/{id}", false, false},
		{RecoveryOff, store, "", false, false},
		{RecoveryTool, noArtifacts{store}, "", false, true},
	} {
		core, logs := observer.New(zapcore.InfoLevel)
		h := &Handler{RecoveryConfig: RecoveryConfig{Recovery: tc.mode}}
		h.applyRecoveryDefaults()
		h.gw = gateway.New(gateway.Config{}, zap.New(core))
		h.gw.EnableRecovery(h.Recovery, h.recoveryConfig(), tc.backend)
		rec := h.gw.CompilerRecovery() // what compilerOptions tells the compiler
		if rec.Hint != tc.hint || (rec.Tools.Chat != "") != tc.tool || (h.gw.Recovery != nil) != (tc.hint != "") {
			t.Fatalf("%s/%T: recovery %+v, runtime %v", tc.mode, tc.backend, rec, h.gw.Recovery != nil)
		}
		if got := logs.FilterMessageSnippet("recovery is off").Len() == 1; got != tc.logged {
			t.Fatalf("%s/%T: logged %v", tc.mode, tc.backend, got)
		}
	}
}

// The API is served under recovery_path and never reaches next; other
// paths do.
func TestRecoveryAPIServedNotForwarded(t *testing.T) {
	store, err := badgervault.Open(badgervault.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	h := &Handler{RecoveryConfig: RecoveryConfig{Recovery: RecoveryAPI}}
	h.applyDefaults()
	h.logger = zap.NewNop()
	h.gw = h.newGateway(nil)
	h.gw.Tenants = gateway.TenantHasher([]byte("0123456789abcdef0123456789abcdef"))
	h.gw.Compile = func(context.Context, compiler.Request) compiler.Result { panic("no candidate is compiled here") }
	h.gw.EnableRecovery(h.Recovery, h.recoveryConfig(), store)
	for _, tc := range []struct {
		path   string
		served bool
		status int
	}{
		{"/token-terminator/artifacts/a_00000000000000000000000000000000", true, http.StatusNotFound},
		{"/token-terminator/artifacts?q=x", true, http.StatusOK},
		{"/token-terminator/other", true, http.StatusNotFound},
		{"/v1/models", false, 0},
	} {
		w, s := serve(t, h, newRequest(http.MethodGet, tc.path, nil))
		served := s.calls == 0
		if served != tc.served || (served && w.Code != tc.status) {
			t.Fatalf("%s: served %v status %d", tc.path, served, w.Code)
		}
	}
	var _ recovery.Artifacts = store
}
