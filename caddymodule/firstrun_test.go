package caddymodule

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault/badgervault"
)

// A negative, empty or malformed size is refused naming the subdirective
// and the value, never with the size parser's own message.
func TestSizeErrorsNamed(t *testing.T) {
	tests := []struct{ input, err string }{
		{"token_terminator {\nvault badger {\nmax_bytes -5\n}\n}", "max_bytes: size must be positive, got '-5'"},
		{"token_terminator {\nvault badger {\ntenant_max_bytes -1GiB\n}\n}", "tenant_max_bytes: size must be positive, got '-1GiB'"},
		{"token_terminator {\nvault badger {\nmax_bytes \"\"\n}\n}", "max_bytes: empty size; want a positive size such as 512MiB"},
		{"token_terminator {\nvault badger {\nmax_bytes 12XB\n}\n}", "max_bytes: bad size '12XB': want a number with an optional unit"},
		{"token_terminator {\nvault redis {\nmax_bytes -5\n}\n}", "max_bytes: size must be positive, got '-5'"},
		{"token_terminator {\nvault_max_bytes -5\n}", "vault_max_bytes: size must be positive, got '-5'"},
		{"token_terminator {\nmax_body_size -1MB\n}", "max_body_size: size must be positive, got '-1MB'"},
		{"token_terminator {\ntoken_cache_size \" \"\n}", "token_cache_size: empty size"},
		{"token_terminator {\nmax_buffered_bytes 0\n}", "max_buffered_bytes: size must be positive"},
		{"token_terminator {\nrequire_vault yes\n}", "require_vault: want on or off, got 'yes'"},
	}
	for _, tt := range tests {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tt.input))
		if err == nil || !strings.Contains(err.Error(), tt.err) || strings.Contains(err.Error(), "strconv") {
			t.Errorf("%q: error %v, want %q", tt.input, err, tt.err)
		}
	}
	var h Handler
	if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("token_terminator {\nrequire_vault on\n}")); err != nil || h.RequireVault == nil || !*h.RequireVault {
		t.Fatalf("require_vault on: %v, %v", err, h.RequireVault)
	}
}

// Provisioning a config (all that `caddy validate` does) opens no vault:
// no directory, no database, no ballast; the vault opens when the config
// starts.
func TestProvisionOpensNoVault(t *testing.T) {
	app, ctx := newApp(t)
	dir := filepath.Join(t.TempDir(), "vault")
	h := &Handler{VaultDir: dir}
	err := h.provision(ctx, app)
	t.Cleanup(func() { _ = h.Cleanup() })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("provisioning created the vault directory (%v)", err)
	}
	if app.peekVault("badger:"+dir) != nil {
		t.Fatal("provisioning opened the vault")
	}
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "MANIFEST")); err != nil {
		t.Fatalf("the started config has no vault: %v", err)
	}
	if h.gw.Compile == nil || !isOpen(h) {
		t.Fatal("the handler is not attached to its vault after Start")
	}
}

// require_vault on: a vault that cannot open refuses the config when it
// starts, naming the vault; off (the default) passes candidates through.
func TestRequireVault(t *testing.T) {
	dir := t.TempDir()
	st, err := badgervault.Open(badgervault.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if err := os.WriteFile(filepath.Join(dir, "MANIFEST"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	app, ctx := newApp(t)
	err = provisionHandler(t, app, ctx, &Handler{VaultDir: dir, RequireVault: boolp(true)})
	if err == nil || !strings.Contains(err.Error(), "vault badger:"+dir) || !strings.Contains(err.Error(), "require_vault is on") {
		t.Fatalf("require_vault on with a damaged vault: %v", err)
	}
	app2, ctx2 := newApp(t)
	h := &Handler{VaultDir: dir, RequireVault: boolp(false)}
	if err := provisionHandler(t, app2, ctx2, h); err != nil || h.gw.VaultErr == "" {
		t.Fatalf("require_vault off: %v, vaultErr %q", err, h.gw.VaultErr)
	}
}

// Caddy starts its apps in no fixed order, so the HTTP server may serve
// before this app's Start has opened the vault: a candidate that arrives
// meanwhile waits for the open (within compile_timeout) and is compiled,
// instead of passing on with no decision; one that waits longer than
// compile_timeout passes on untouched.
func TestRequestBeforeStartWaitsForTheVault(t *testing.T) {
	app, ctx := newApp(t)
	h := &Handler{VaultDir: filepath.Join(t.TempDir(), "vault"), CompileTimeout: caddy.Duration(30 * time.Second)}
	err := h.provision(ctx, app)
	t.Cleanup(func() { _ = h.Cleanup() })
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		tt, _ := serveBody(h, largeBody(7, 200000))
		got <- tt
	}()
	select {
	case tt := <-got:
		t.Fatalf("the request was answered before the vault opened: %q", tt)
	case <-time.After(200 * time.Millisecond):
	}
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	if tt := <-got; tt == "" {
		t.Fatal("the request that waited for the vault passed on with no decision")
	}

	app2, ctx2 := newApp(t)
	h2 := &Handler{VaultDir: filepath.Join(t.TempDir(), "vault"), CompileTimeout: caddy.Duration(50 * time.Millisecond)}
	err = h2.provision(ctx2, app2)
	t.Cleanup(func() { _ = h2.Cleanup() })
	if err != nil {
		t.Fatal(err)
	}
	if tt, err := serveBody(h2, largeBody(8, 200000)); err != nil || tt != "" {
		t.Fatalf("a request past compile_timeout before Start: %q, %v (want passed on untouched)", tt, err)
	}
}

// Once the started config's vault is attached, the warm-up compiles its
// generated conversation to receipts in the background and leaves the
// vault as it was: no artifact written, no lineage recorded.
func TestWarmUpLeavesTheVaultUntouched(t *testing.T) {
	app, ctx := newApp(t)
	dir := filepath.Join(t.TempDir(), "vault")
	h := &Handler{VaultDir: dir, CompileTimeout: caddy.Duration(time.Minute)}
	err := h.provision(ctx, app)
	t.Cleanup(func() { _ = h.Cleanup() })
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	if !<-h.warmedUp {
		t.Fatal("the warm-up did not compile its conversation to receipts")
	}
	ov := app.peekVault("badger:" + dir)
	if ov == nil {
		t.Fatal("no open vault")
	}
	st := ov.backend.(vaultStatser).Stats()
	if st.Artifacts != 0 || st.Written != 0 || st.Lineage != 0 {
		t.Fatalf("the warm-up wrote to the vault: %+v", st)
	}
}
