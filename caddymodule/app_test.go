package caddymodule

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tokenterminator/caddy-token-terminator/internal/gateway"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/badgervault"
)

// newApp provisions an App the way Caddy does and cleans it up after t.
func newApp(t testing.TB) (*App, caddy.Context) {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	app := new(App)
	if err := app.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = app.Cleanup()
	})
	return app, ctx
}

// provisionHandler provisions h and starts its config, as Caddy does.
func provisionHandler(t testing.TB, app *App, ctx caddy.Context, h *Handler) error {
	t.Helper()
	err := h.provision(ctx, app)
	t.Cleanup(func() { _ = h.Cleanup() })
	if err != nil {
		return err
	}
	return app.Start()
}

// One storage, one configuration: a second handler naming the same vault
// directory with another capacity is refused, both values named; the same
// configuration shares one open vault.
func TestVaultConflictRefused(t *testing.T) {
	app, ctx := newApp(t)
	dir := t.TempDir()
	a := &Handler{VaultDir: dir, VaultMaxBytes: int64p(1 << 20)}
	if err := provisionHandler(t, app, ctx, a); err != nil {
		t.Fatal(err)
	}
	same := &Handler{VaultDir: dir, VaultMaxBytes: int64p(1 << 20)}
	if err := provisionHandler(t, app, ctx, same); err != nil {
		t.Fatalf("same configuration refused: %v", err)
	}
	other := &Handler{VaultDir: dir, VaultMaxBytes: int64p(2 << 20)}
	err := provisionHandler(t, app, ctx, other)
	if err == nil || !strings.Contains(err.Error(), "max_bytes=1048576") || !strings.Contains(err.Error(), "max_bytes=2097152") {
		t.Fatalf("conflict: %v", err)
	}
	// A second App (the next config of a reload) shares the open vault
	// and changes its capacity when it starts.
	app2, ctx2 := newApp(t)
	if app2.shared != app.shared {
		t.Fatal("a reload's App does not share the state")
	}
	if err := provisionHandler(t, app2, ctx2, &Handler{VaultDir: dir, VaultMaxBytes: int64p(3 << 20)}); err != nil {
		t.Fatalf("a reload that resizes the vault: %v", err)
	}
	if got := app.peekVault("badger:" + dir).backend.(*badgervault.Store).Stats().MaxBytes; got != 3<<20 {
		t.Fatalf("capacity after the reload %d, want %d", got, 3<<20)
	}
}

// The gateway's tenant hash is the one the Badger vault always used: an
// existing vault's tenants keep their ids.
func TestTenantIDMatchesVault(t *testing.T) {
	st, err := badgervault.Open(badgervault.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	key, err := st.TenantKey(context.Background())
	if err != nil || len(key) != 32 {
		t.Fatalf("key %d bytes, %v", len(key), err)
	}
	hash := gateway.TenantHasher(key)
	for _, cred := range []string{"Bearer sk-a", "sk-ant-b", "x"} {
		if got, want := hash(cred), st.Tenant(cred); got != want {
			t.Fatalf("tenant(%q) = %s, vault says %s", cred, got, want)
		}
	}
	if hash("") != "" {
		t.Fatal("no identity must be no tenant")
	}
}

// tenant_key: the operator's key (placeholders resolved once) replaces the
// vault's, so two gateways with two vaults compute the same tenants; a key
// that resolves short is refused naming the setting, not the value.
func TestTenantKey(t *testing.T) {
	t.Setenv("TT_TEST_TENANT_KEY", "0123456789abcdef-fleet-key")
	app, ctx := newApp(t)
	var tenants []string
	for i := 0; i < 2; i++ {
		h := &Handler{VaultDir: t.TempDir(), TenantKey: "{env.TT_TEST_TENANT_KEY}"}
		if err := provisionHandler(t, app, ctx, h); err != nil {
			t.Fatal(err)
		}
		tenants = append(tenants, h.gw.Tenants("Bearer sk-same"))
	}
	if tenants[0] == "" || tenants[0] != tenants[1] {
		t.Fatalf("tenants %q differ across vaults with one tenant_key", tenants)
	}
	if want := gateway.TenantHasher([]byte("0123456789abcdef-fleet-key"))("Bearer sk-same"); tenants[0] != want {
		t.Fatal("tenant_key not used as the key")
	}
	// Without tenant_key each vault has its own key.
	h1, h2 := &Handler{VaultDir: t.TempDir()}, &Handler{VaultDir: t.TempDir()}
	for _, h := range []*Handler{h1, h2} {
		if err := provisionHandler(t, app, ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	if h1.gw.Tenants("Bearer sk-same") == h2.gw.Tenants("Bearer sk-same") {
		t.Fatal("two vaults' own keys gave one tenant")
	}

	t.Setenv("TT_TEST_SHORT", "short")
	err := provisionHandler(t, app, ctx, &Handler{VaultDir: t.TempDir(), TenantKey: "{env.TT_TEST_SHORT}"})
	if err == nil || !strings.Contains(err.Error(), "tenant_key '{env.TT_TEST_SHORT}'") || strings.Contains(err.Error(), "short'") {
		t.Fatalf("short key: %v", err)
	}
	for _, bad := range []string{"{env.TT_TEST_UNSET_KEY}", "{enz.TT_TEST_TENANT_KEY}-typo-long-enough"} {
		err = provisionHandler(t, app, ctx, &Handler{VaultDir: t.TempDir(), TenantKey: bad})
		if err == nil || !strings.Contains(err.Error(), "tenant_key '"+bad+"'") {
			t.Fatalf("tenant_key %s: %v", bad, err)
		}
	}

	// A key file (trailing newline trimmed by Caddy's file placeholder).
	file := filepath.Join(t.TempDir(), "tenant.key")
	if err := os.WriteFile(file, []byte("0123456789abcdef-fleet-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hf := &Handler{VaultDir: t.TempDir(), TenantKey: "{file." + file + "}"}
	if err := provisionHandler(t, app, ctx, hf); err != nil {
		t.Fatal(err)
	}
	if hf.gw.Tenants("Bearer sk-same") != tenants[0] {
		t.Fatal("tenant_key from a file differs from the same key from the environment")
	}
}

// A vault that does not open (here: a MANIFEST overwritten with junk) does
// not stop the config: the handler passes candidates through with
// vault_error, logs the cause at error level and leaves the files alone.
func TestDamagedVaultPassesThrough(t *testing.T) {
	dir := t.TempDir()
	st, err := badgervault.Open(badgervault.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	manifest := filepath.Join(dir, "MANIFEST")
	junk := []byte("this is not a badger manifest")
	if err := os.WriteFile(manifest, junk, 0o600); err != nil {
		t.Fatal(err)
	}

	app, ctx := newApp(t)
	core, logs := observer.New(zapcore.InfoLevel)
	h := &Handler{VaultDir: dir}
	err = provisionHandler(t, app, ctx, h)
	if err != nil {
		t.Fatalf("a damaged vault stopped the config: %v", err)
	}
	h.gw.Logger = zap.New(core)
	if h.gw.VaultErr == "" {
		t.Fatal("damaged vault not noticed")
	}
	r := newRequest("POST", chatPath, strings.NewReader(`{"messages":[]}`))
	w, s := serve(t, h, r)
	if got := w.Header().Get(HeaderName); !strings.HasPrefix(got, "passthrough=vault_error;") || string(s.body) != `{"messages":[]}` {
		t.Fatalf("header %q body %q", got, s.body)
	}
	if d, _ := logs.All()[0].ContextMap()["detail"].(string); !strings.Contains(d, "vault did not open") {
		t.Fatalf("log detail %q", d)
	}
	if data, _ := os.ReadFile(manifest); string(data) != string(junk) {
		t.Fatal("the damaged MANIFEST was touched")
	}
	// Config-fixable problems are still refused: the path is a file.
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	if err := provisionHandler(t, app, ctx, &Handler{VaultDir: file}); err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("vault dir that is a file: %v", err)
	}
}

// The compiler (and its caches) is shared by handlers with one vault, one
// counter and one configuration, so a reload keeps it warm.
func TestCompilerShared(t *testing.T) {
	app, ctx := newApp(t)
	dir := t.TempDir()
	hs := []*Handler{{VaultDir: dir}, {VaultDir: dir}, {VaultDir: dir, InlineLeases: intp(3)}}
	for _, h := range hs {
		if err := provisionHandler(t, app, ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	key := func(h *Handler) string {
		b := &BadgerVault{Dir: dir}
		tc := tokensConfig(h)
		return compilerKey(b.VaultKey(), counterKey(tc), h.compilerOptions())
	}
	if n, _ := app.shared.compilers.References(key(hs[0])); n != 2 {
		t.Fatalf("compiler of the default options has %d users, want 2", n)
	}
	if n, _ := app.shared.compilers.References(key(hs[2])); n != 1 {
		t.Fatalf("compiler of other options has %d users, want 1", n)
	}
}
