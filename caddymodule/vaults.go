package caddymodule

import (
	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/vault"
)

// VaultBackend is a module of the token_terminator.vaults namespace: it
// names one storage and opens a vault.Backend on it. The App opens each
// storage once, whatever the number of handlers and configs that name it,
// and refuses a second, different configuration of the same storage.
//
// A backend module is small: its configuration fields, Provision (defaults;
// refuse what the operator can fix in the config), VaultKey, VaultConfig,
// OpenVault and UnmarshalCaddyfile for its `vault <name> { … }` block. See
// BadgerVault in vault_badger.go.
type VaultBackend interface {
	caddy.Module
	// VaultKey names the storage, e.g. "badger:/var/lib/tt"; one key, one
	// open backend.
	VaultKey() string
	// VaultConfig describes the rest of the configuration (e.g.
	// "max_bytes=536870912"); two configurations of one key must agree.
	VaultConfig() string
	// OpenVault opens the backend. maxArtifactBytes bounds one artifact
	// (no artifact is larger than the body it came from); the first
	// handler to open a storage sets it from its max_body_size.
	OpenVault(log *zap.Logger, maxArtifactBytes int64) (vault.Backend, error)
}
