package caddymodule

import (
	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// VaultBackend is a module of the token_terminator.vaults namespace: it
// names one storage and opens a vault.Backend on it. The App opens each
// storage once, whatever the number of handlers and configs that name it,
// when a config that names it starts (never while a config is only
// validated), and refuses a second, different configuration of the same
// storage within one config. A reload may change a storage's limits
// (VaultConfig) on the open backend, but not its identity.
//
// A backend module is small: its configuration fields, Provision (defaults;
// refuse what the operator can fix in the config, without side effects),
// the methods below and UnmarshalCaddyfile for its `vault <name> { … }`
// block. See BadgerVault in vault_badger.go.
type VaultBackend interface {
	caddy.Module
	// VaultKey names the storage, e.g. "badger:/var/lib/tt"; one key, one
	// open backend.
	VaultKey() string
	// VaultIdentity describes what else the open backend is bound to and
	// cannot change while it is open (e.g. "cluster=true"); "" when
	// nothing. A reload that changes it is refused, both values named.
	VaultIdentity() string
	// VaultConfig describes the rest of the configuration, the limits
	// (e.g. "max_bytes=536870912"): within one config every handler that
	// names the key must agree; a reload changes them on the open backend
	// with SetVaultLimits.
	VaultConfig() string
	// SetVaultLimits applies VaultConfig's limits to b, a backend this
	// kind of module opened.
	SetVaultLimits(b vault.Backend) error
	// CheckVault checks the storage without changing anything (the
	// config may only be validated): it returns what the operator must
	// fix, and logs a warning naming the storage when it cannot be reached.
	CheckVault(log *zap.Logger) error
	// VaultInfo is the start-up line's description: backend, location,
	// capacity.
	VaultInfo() []zap.Field
	// OpenVault opens the backend. maxArtifactBytes bounds one artifact
	// (no artifact is larger than the body it came from); the first
	// handler to open a storage sets it from its max_body_size.
	OpenVault(log *zap.Logger, maxArtifactBytes int64) (vault.Backend, error)
}
