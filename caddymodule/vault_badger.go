package caddymodule

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/vault"
)

func init() {
	caddy.RegisterModule(BadgerVault{})
}

// BadgerVault is the embedded vault: a Badger database in a directory.
//
//	vault badger {
//	    dir       <path>
//	    max_bytes <size>
//	}
type BadgerVault struct {
	// Database directory (mode 0700). Default: Caddy's data directory +
	// "/token-terminator".
	Dir string `json:"dir,omitempty"`
	// Capacity: artifact bytes before compression. When full, requests
	// pass through. Default: 512 MiB.
	MaxBytes *int64 `json:"max_bytes,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (BadgerVault) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "token_terminator.vaults.badger",
		New: func() caddy.Module { return new(BadgerVault) },
	}
}

func defaultVaultDir() string { return filepath.Join(caddy.AppDataDir(), DefaultVaultSubdir) }

// Provision applies the defaults and prepares the directory. What the
// operator can fix in the config (the path is a file, it cannot be created
// or restricted to 0700) is refused here; a database that fails to open is
// not: the handler then passes requests through (see App.vault).
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
	if err := ensurePrivateDir(b.Dir); err != nil {
		return fmt.Errorf("vault dir '%s': %v", b.Dir, err)
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
	return nil
}

// VaultKey implements VaultBackend.
func (b *BadgerVault) VaultKey() string { return "badger:" + b.Dir }

// VaultConfig implements VaultBackend.
func (b *BadgerVault) VaultConfig() string { return fmt.Sprintf("max_bytes=%d", *b.MaxBytes) }

// OpenVault implements VaultBackend.
func (b *BadgerVault) OpenVault(log *zap.Logger, maxArtifactBytes int64) (vault.Backend, error) {
	return vault.Open(vault.Config{
		Dir:              b.Dir,
		MaxBytes:         *b.MaxBytes,
		MaxArtifactBytes: maxArtifactBytes,
		Logger:           log,
	})
}

// UnmarshalCaddyfile reads the block after `vault badger`.
func (b *BadgerVault) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return parseBlock(d, "vault badger", map[string]func(string) error{
		"dir":       func(v string) error { b.Dir = v; return nil },
		"max_bytes": func(v string) error { return setSize(&b.MaxBytes, v) },
	})
}

// ensurePrivateDir creates dir with mode 0700 and tightens an existing
// directory that is readable by group or others.
func ensurePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("not a directory")
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("directory is accessible by other users and cannot be restricted to 0700: %v", err)
		}
	}
	return nil
}

// Interface guards
var (
	_ VaultBackend          = (*BadgerVault)(nil)
	_ caddy.Provisioner     = (*BadgerVault)(nil)
	_ caddy.Validator       = (*BadgerVault)(nil)
	_ caddyfile.Unmarshaler = (*BadgerVault)(nil)
)
