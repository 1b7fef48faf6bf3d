package redisvault

import (
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// Defaults applied by Open to zero Config fields.
const (
	DefaultKeyPrefix = "tt:"
	DefaultOpTimeout = time.Second
	// DefaultTenantShare is the fraction of MaxBytes one tenant may hold
	// when TenantMaxBytes is zero: one tenant can never fill the fleet's
	// vault for everyone.
	DefaultTenantShare = 4 // TenantMaxBytes = MaxBytes / 4
)

// Config configures Open. Zero fields take the defaults named on them.
type Config struct {
	// URL is the server, redis://[user:password@]host:port/db or rediss://
	// for TLS. Required. Secrets belong in a Caddy placeholder such as
	// {env.TT_REDIS_URL}; the URL is never logged.
	URL string
	// Cluster makes URL a Redis Cluster seed list:
	// redis://[user:password@]host:port?addr=host2:port&addr=host3:port.
	// Every multi-key call stays on one slot (the tenant's hash tag).
	Cluster bool
	// KeyPrefix starts every key, so several fleets (or tests) can share a
	// server. Default "tt:". It may not contain '{' or '}': the tenant's
	// hash tag must be the key's first braces.
	KeyPrefix string
	// MaxBytes caps the stored Text+Raw bytes of all tenants, accounted in
	// Redis and shared by every store on it (the fleet). Default 512 MiB,
	// as for Badger.
	MaxBytes int64
	// TenantMaxBytes caps one tenant's Text+Raw bytes. Default MaxBytes/4;
	// at most MaxBytes.
	TenantMaxBytes int64
	// MinReplicas, when positive, makes Persist wait (WAIT) until that many
	// replicas acknowledged new artifacts before they count as durable.
	// Default 0: written and read back on the primary.
	MinReplicas int
	// OpTimeout bounds every Store call as a whole (all its round trips),
	// and dialing. Default 1s.
	OpTimeout time.Duration
	// Retention is the lineage TTL and the window in which a seen artifact
	// is never evicted. Default 7 days, as for Badger.
	Retention time.Duration
	// MaxArtifactBytes caps one artifact (Text+Raw). Default 8 MiB, as for
	// Badger.
	MaxArtifactBytes int64
	// Logger receives warnings (server unreachable at open, evictions).
	// They carry counts and sizes, never content or the URL. Nil: none.
	Logger *zap.Logger
	// Now is the clock for last-seen times and retention. Default
	// time.Now. Stores of one fleet should have synchronized clocks.
	Now func() time.Time
}

// withDefaults returns cfg with defaults applied, or an error naming the
// first bad value.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.URL == "" {
		return cfg, fmt.Errorf("redisvault: url is required")
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(cfg.KeyPrefix, "{}") {
		return cfg, fmt.Errorf("redisvault: key_prefix %q may not contain '{' or '}'", cfg.KeyPrefix)
	}
	for _, v := range []struct {
		name string
		n    int64
	}{{"max_bytes", cfg.MaxBytes}, {"tenant_max_bytes", cfg.TenantMaxBytes}, {"min_replicas", int64(cfg.MinReplicas)},
		{"max_artifact_bytes", cfg.MaxArtifactBytes}, {"op_timeout", int64(cfg.OpTimeout)}, {"retention", int64(cfg.Retention)}} {
		if v.n < 0 {
			return cfg, fmt.Errorf("redisvault: %s %d is negative", v.name, v.n)
		}
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = vault.DefaultMaxBytes
	}
	if cfg.TenantMaxBytes == 0 {
		cfg.TenantMaxBytes = cfg.MaxBytes / DefaultTenantShare
	}
	if cfg.TenantMaxBytes > cfg.MaxBytes {
		return cfg, fmt.Errorf("redisvault: tenant_max_bytes %d exceeds max_bytes %d", cfg.TenantMaxBytes, cfg.MaxBytes)
	}
	if cfg.MaxArtifactBytes == 0 {
		cfg.MaxArtifactBytes = vault.DefaultMaxArtifactBytes
	}
	if cfg.OpTimeout == 0 {
		cfg.OpTimeout = DefaultOpTimeout
	}
	if cfg.Retention == 0 {
		cfg.Retention = vault.DefaultRetention
	}
	if cfg.Retention < time.Millisecond {
		return cfg, fmt.Errorf("redisvault: retention %s is under a millisecond", cfg.Retention)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg, nil
}
