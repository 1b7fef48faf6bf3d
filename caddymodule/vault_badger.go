package caddymodule

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/badgervault"
)

func init() {
	caddy.RegisterModule(BadgerVault{})
}

// BadgerVault is the embedded vault: a Badger database in a directory.
//
//	vault badger {
//	    dir                <path>
//	    max_bytes          <size>
//	    tenant_max_bytes   <size>
//	    move_aside_damaged on|off
//	}
type BadgerVault struct {
	// Database directory (mode 0700). Default: Caddy's data directory +
	// "/token-terminator".
	Dir string `json:"dir,omitempty"`
	// Capacity: artifact bytes before compression, and lineage. When full,
	// requests pass through. Default: 512 MiB.
	MaxBytes *int64 `json:"max_bytes,omitempty"`
	// Most artifact bytes one tenant may hold: a tenant at its quota
	// evicts its own least recently seen artifacts, then passes through, so
	// one tenant can never fill the vault for everyone. Default:
	// max_bytes/4 (set it to max_bytes for a single-key deployment).
	TenantMaxBytes *int64 `json:"tenant_max_bytes,omitempty"`
	// On a damaged database, move the directory aside
	// (<dir>.damaged-<UTC time>) and start empty instead of passing
	// through. The fresh vault has none of the old artifacts, lineage or
	// tenant key. Default: off.
	MoveAsideDamaged bool `json:"move_aside_damaged,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (BadgerVault) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "token_terminator.vaults.badger",
		New: func() caddy.Module { return new(BadgerVault) },
	}
}

func defaultVaultDir() string { return filepath.Join(caddy.AppDataDir(), DefaultVaultSubdir) }

// Provision applies the defaults and checks the directory without
// creating it (the config may only be validated): a path that exists and
// is not a directory is refused here. The directory is created (mode
// 0700) when the vault opens; a database that fails to open then does not
// stop Caddy: the handler passes requests through (see App.vault), unless
// require_vault is on.
func (b *BadgerVault) Provision(caddy.Context) error {
	if b.Dir == "" {
		b.Dir = defaultVaultDir()
	}
	if b.MaxBytes == nil {
		b.MaxBytes = int64p(DefaultVaultMaxBytes)
	}
	if err := b.Validate(); err != nil {
		return err
	}
	dir, err := filepath.Abs(b.Dir)
	if err != nil {
		return fmt.Errorf("vault dir '%s': %v", b.Dir, err)
	}
	b.Dir = filepath.Clean(dir)
	if fi, err := os.Stat(b.Dir); err == nil && !fi.IsDir() {
		return fmt.Errorf("vault dir '%s': not a directory", b.Dir)
	}
	return nil
}

// Validate checks the values (unset ones are valid: they get defaults).
func (b *BadgerVault) Validate() error {
	if b.Dir != "" && strings.TrimSpace(b.Dir) == "" {
		return fmt.Errorf("vault dir must not be blank")
	}
	if b.MaxBytes != nil && *b.MaxBytes < 1 {
		return fmt.Errorf("vault max_bytes must be positive, got %d", *b.MaxBytes)
	}
	if b.TenantMaxBytes != nil && *b.TenantMaxBytes < 1 {
		return fmt.Errorf("vault tenant_max_bytes must be positive, got %d", *b.TenantMaxBytes)
	}
	if b.TenantMaxBytes != nil && b.MaxBytes != nil && *b.TenantMaxBytes > *b.MaxBytes {
		return fmt.Errorf("vault tenant_max_bytes (%d) must not exceed max_bytes (%d)", *b.TenantMaxBytes, *b.MaxBytes)
	}
	return nil
}

// VaultKey implements VaultBackend.
func (b *BadgerVault) VaultKey() string { return "badger:" + b.Dir }

// VaultIdentity implements VaultBackend: the directory is the key, and
// nothing else binds an open database.
func (b *BadgerVault) VaultIdentity() string { return "" }

// VaultConfig implements VaultBackend. move_aside_damaged applies when the
// vault next opens.
func (b *BadgerVault) VaultConfig() string {
	return fmt.Sprintf("max_bytes=%d tenant_max_bytes=%d move_aside_damaged=%v", *b.MaxBytes, b.tenantMax(), b.MoveAsideDamaged)
}

// tenantMax is the quota with its default applied (the vault's own rule).
func (b *BadgerVault) tenantMax() int64 {
	if b.TenantMaxBytes != nil {
		return *b.TenantMaxBytes
	}
	return max(*b.MaxBytes/4, 1)
}

// OpenVault implements VaultBackend.
func (b *BadgerVault) OpenVault(log *zap.Logger, maxArtifactBytes int64) (vault.Backend, error) {
	return badgervault.Open(badgervault.Config{
		Dir:              b.Dir,
		MaxBytes:         *b.MaxBytes,
		TenantMaxBytes:   b.tenantMax(),
		MoveAsideDamaged: b.MoveAsideDamaged,
		MaxArtifactBytes: maxArtifactBytes,
		Logger:           log,
	})
}

// SetVaultLimits implements VaultBackend.
func (b *BadgerVault) SetVaultLimits(v vault.Backend) error {
	st, ok := v.(*badgervault.Store)
	if !ok {
		return fmt.Errorf("not a badger vault (%T)", v)
	}
	st.SetLimits(*b.MaxBytes, b.tenantMax())
	return nil
}

// CheckVault implements VaultBackend: Provision checked the path; the
// database itself is only opened by a config that starts.
func (b *BadgerVault) CheckVault(*zap.Logger) error { return nil }

// VaultInfo implements VaultBackend.
func (b *BadgerVault) VaultInfo() []zap.Field {
	return []zap.Field{zap.String("backend", "badger"), zap.String("dir", b.Dir),
		zap.Int64("max_bytes", *b.MaxBytes), zap.Int64("tenant_max_bytes", b.tenantMax()),
		zap.Bool("move_aside_damaged", b.MoveAsideDamaged)}
}

// UnmarshalCaddyfile reads the block after `vault badger`.
func (b *BadgerVault) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return parseBlock(d, "vault badger", map[string]func(string) error{
		"dir":              func(v string) error { b.Dir = v; return nil },
		"max_bytes":        func(v string) error { return setSize(&b.MaxBytes, v) },
		"tenant_max_bytes": func(v string) error { return setSize(&b.TenantMaxBytes, v) },
		"move_aside_damaged": func(v string) error {
			var on *bool
			if err := setOnOff(&on, v); err != nil {
				return err
			}
			b.MoveAsideDamaged = *on
			return nil
		},
	})
}

// Interface guards
var (
	_ VaultBackend          = (*BadgerVault)(nil)
	_ caddy.Provisioner     = (*BadgerVault)(nil)
	_ caddy.Validator       = (*BadgerVault)(nil)
	_ caddyfile.Unmarshaler = (*BadgerVault)(nil)
)
