package caddymodule

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/redisvault"
)

func init() {
	caddy.RegisterModule(RedisVault{})
}

// go-redis logs (a refused dial, a bad connection dropped from the pool)
// through one process-wide logger that writes plain text to stderr, which
// would break Caddy's JSON log. The first Redis vault provisioned sends it
// to Caddy's logger instead, as warnings of "token_terminator.vault.redis".
// redisLogger is read by go-redis's goroutines; a test swaps it.
var (
	redisLogOnce sync.Once
	redisLogger  atomic.Pointer[func() *zap.Logger]
)

func init() {
	f := func() *zap.Logger { return caddy.Log().Named("token_terminator.vault.redis") }
	redisLogger.Store(&f)
}

type caddyRedisLogger struct{}

func (caddyRedisLogger) Printf(_ context.Context, format string, v ...any) {
	(*redisLogger.Load())().Warn(strings.TrimSpace(fmt.Sprintf(format, v...)))
}

// RedisVault is the fleet's vault: Redis (or Valkey) shared by every
// gateway behind one load balancer (vault/redisvault).
//
//	vault redis {
//	    url              <url>        # e.g. {env.TT_REDIS_URL}
//	    cluster          on|off
//	    key_prefix       <prefix>
//	    max_bytes        <size>
//	    tenant_max_bytes <size>
//	    min_replicas     <n>
//	    op_timeout       <duration>
//	}
type RedisVault struct {
	// redis://[user:password@]host:port/db, or rediss:// for TLS; with
	// cluster, a seed list (…?addr=host2:port&addr=host3:port). Usually a
	// placeholder such as {env.TT_REDIS_URL}, resolved when the config
	// loads. Required. Never logged, and no part of an error but its host.
	URL string `json:"url,omitempty"`
	// The URL names a Redis Cluster. Default: off.
	Cluster bool `json:"cluster,omitempty"`
	// Starts every key, so several fleets can share a server. Default:
	// "tt:".
	KeyPrefix string `json:"key_prefix,omitempty"`
	// The fleet's capacity (artifact bytes), accounted in Redis. Default:
	// 512 MiB.
	MaxBytes *int64 `json:"max_bytes,omitempty"`
	// Most artifact bytes one tenant may hold. Default: max_bytes/4.
	TenantMaxBytes *int64 `json:"tenant_max_bytes,omitempty"`
	// Replicas that must acknowledge (WAIT) a new artifact before its
	// receipt goes out. Default: 0.
	MinReplicas *int `json:"min_replicas,omitempty"`
	// Bound on every vault call, all its round trips. Default: 1s.
	OpTimeout caddy.Duration `json:"op_timeout,omitempty"`

	url string // URL with its placeholders resolved
}

// CaddyModule returns the Caddy module information.
func (RedisVault) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "token_terminator.vaults.redis",
		New: func() caddy.Module { return new(RedisVault) },
	}
}

// Provision resolves the URL's placeholders, applies the defaults and
// refuses what the operator can fix in the config (a missing or malformed
// URL, an unknown placeholder, bad sizes). A server that is down is not
// refused: see OpenVault.
func (r *RedisVault) Provision(caddy.Context) error {
	redisLogOnce.Do(func() { redis.SetLogger(caddyRedisLogger{}) })
	if r.MaxBytes == nil {
		r.MaxBytes = int64p(DefaultVaultMaxBytes)
	}
	if r.TenantMaxBytes == nil {
		r.TenantMaxBytes = int64p(max(*r.MaxBytes/redisvault.DefaultTenantShare, 1))
	}
	if r.KeyPrefix == "" {
		r.KeyPrefix = redisvault.DefaultKeyPrefix
	}
	if r.MinReplicas == nil {
		r.MinReplicas = intp(0)
	}
	if r.OpTimeout == 0 {
		r.OpTimeout = caddy.Duration(redisvault.DefaultOpTimeout)
	}
	if strings.TrimSpace(r.URL) == "" {
		return fmt.Errorf("vault redis: url is required, e.g. url {env.TT_REDIS_URL}")
	}
	// An unknown or empty placeholder is refused, not taken literally.
	v, err := caddy.NewReplacer().ReplaceOrErr(r.URL, true, true)
	if err != nil {
		return fmt.Errorf("vault redis url '%s': %v", r.URL, err)
	}
	r.url = v
	if err := r.Validate(); err != nil {
		return err
	}
	if err := r.storeConfig(nil, 0).Validate(); err != nil {
		return fmt.Errorf("vault redis url '%s': %v", r.shownURL(), err)
	}
	return nil
}

// Validate checks the values (unset ones are valid: they get defaults).
func (r *RedisVault) Validate() error {
	if r.MaxBytes != nil && *r.MaxBytes < 1 {
		return fmt.Errorf("vault redis max_bytes must be positive, got %d", *r.MaxBytes)
	}
	if r.TenantMaxBytes != nil && *r.TenantMaxBytes < 1 {
		return fmt.Errorf("vault redis tenant_max_bytes must be positive, got %d", *r.TenantMaxBytes)
	}
	if r.TenantMaxBytes != nil && r.MaxBytes != nil && *r.TenantMaxBytes > *r.MaxBytes {
		return fmt.Errorf("vault redis tenant_max_bytes (%d) must not exceed max_bytes (%d)", *r.TenantMaxBytes, *r.MaxBytes)
	}
	if r.MinReplicas != nil && *r.MinReplicas < 0 {
		return fmt.Errorf("vault redis min_replicas must be 0 or more, got %d", *r.MinReplicas)
	}
	if r.OpTimeout < 0 {
		return fmt.Errorf("vault redis op_timeout must be positive, got %s", time.Duration(r.OpTimeout))
	}
	if strings.ContainsAny(r.KeyPrefix, "{}") {
		return fmt.Errorf("vault redis key_prefix '%s' may not contain '{' or '}'", r.KeyPrefix)
	}
	return nil
}

// shownURL is what errors may say of the URL: the placeholder as written,
// or the URL without its password.
func (r *RedisVault) shownURL() string {
	if strings.Contains(r.URL, "{") {
		return r.URL
	}
	return redactedURL(r.url)
}

// redactedURL is raw without its password (and without its query, which
// can carry one too), or a fixed text when it does not parse.
func redactedURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(not shown: it does not parse and may hold a password)"
	}
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	u.RawQuery, u.Fragment = "", ""
	return u.String()
}

// VaultKey implements VaultBackend: the server (host, database, no
// password) and the key prefix, which together name one storage.
func (r *RedisVault) VaultKey() string {
	return "redis:" + redactedURL(r.url) + "|" + r.KeyPrefix
}

// VaultIdentity implements VaultBackend: whether the URL names a cluster
// decides the client the open vault has.
func (r *RedisVault) VaultIdentity() string { return fmt.Sprintf("cluster=%v", r.Cluster) }

// VaultConfig implements VaultBackend.
func (r *RedisVault) VaultConfig() string {
	return fmt.Sprintf("max_bytes=%d tenant_max_bytes=%d min_replicas=%d op_timeout=%s",
		*r.MaxBytes, *r.TenantMaxBytes, *r.MinReplicas, time.Duration(r.OpTimeout))
}

// SetVaultLimits implements VaultBackend.
func (r *RedisVault) SetVaultLimits(v vault.Backend) error {
	st, ok := v.(*redisvault.Store)
	if !ok {
		return fmt.Errorf("not a redis vault (%T)", v)
	}
	return st.SetLimits(redisvault.Limits{MaxBytes: *r.MaxBytes, TenantMaxBytes: *r.TenantMaxBytes,
		MinReplicas: *r.MinReplicas, OpTimeout: time.Duration(r.OpTimeout)})
}

// CheckVault implements VaultBackend: one connection that reads the
// server's eviction policy and writes nothing. A server that answers and
// refuses (an evicting policy, rejected credentials) is an error; one that
// cannot be reached is a warning naming it: the config loads, and its
// requests pass through until the server answers.
func (r *RedisVault) CheckVault(log *zap.Logger) error {
	err := redisvault.Check(context.Background(), r.storeConfig(nil, 0))
	if err == nil {
		return nil
	}
	if redisvault.Refused(err) {
		return fmt.Errorf("vault redis %s: %w", redactedURL(r.url), err)
	}
	log.Warn("vault redis not reachable; requests pass through (passthrough=vault_error) until it answers",
		zap.String("vault", r.VaultKey()), zap.String("url", redactedURL(r.url)), zap.Error(err))
	return nil
}

// VaultInfo implements VaultBackend.
func (r *RedisVault) VaultInfo() []zap.Field {
	return []zap.Field{zap.String("backend", "redis"), zap.String("url", redactedURL(r.url)),
		zap.String("key_prefix", r.KeyPrefix), zap.Bool("cluster", r.Cluster),
		zap.Int64("max_bytes", *r.MaxBytes), zap.Int64("tenant_max_bytes", *r.TenantMaxBytes),
		zap.Int("min_replicas", *r.MinReplicas), zap.Duration("op_timeout", time.Duration(r.OpTimeout))}
}

func (r *RedisVault) storeConfig(log *zap.Logger, maxArtifactBytes int64) redisvault.Config {
	return redisvault.Config{
		URL:              r.url,
		Cluster:          r.Cluster,
		KeyPrefix:        r.KeyPrefix,
		MaxBytes:         *r.MaxBytes,
		TenantMaxBytes:   *r.TenantMaxBytes,
		MinReplicas:      *r.MinReplicas,
		OpTimeout:        time.Duration(r.OpTimeout),
		MaxArtifactBytes: maxArtifactBytes,
		Logger:           log,
	}
}

// OpenVault implements VaultBackend. An unreachable server is not an
// error (the store starts and recovers by itself when the server answers);
// a server that answers and refuses (an eviction policy that could drop
// artifacts, rejected credentials) is the operator's to fix, so it is an
// errVaultRefused and Caddy refuses the config, the value named.
func (r *RedisVault) OpenVault(log *zap.Logger, maxArtifactBytes int64) (vault.Backend, error) {
	s, err := redisvault.Open(context.Background(), r.storeConfig(log, maxArtifactBytes))
	if err != nil {
		return nil, errVaultRefused{fmt.Errorf("vault redis %s: %w", redactedURL(r.url), err)}
	}
	return s, nil
}

// errVaultRefused is a backend refusing its configuration when it opens:
// unlike a backend that cannot be reached, the operator fixes it in the
// config or on the server, so the config is refused.
type errVaultRefused struct{ err error }

func (e errVaultRefused) Error() string { return e.err.Error() }
func (e errVaultRefused) Unwrap() error { return e.err }

// UnmarshalCaddyfile reads the block after `vault redis` and checks its
// values, so `caddy adapt` already refuses bad ones (the URL is checked at
// load, once its placeholders resolve).
func (r *RedisVault) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	err := parseBlock(d, "vault redis", map[string]func(string) error{
		"url": func(v string) error { r.URL = v; return nil },
		"cluster": func(v string) error {
			var on *bool
			if err := setOnOff(&on, v); err != nil {
				return err
			}
			r.Cluster = *on
			return nil
		},
		"key_prefix":       func(v string) error { r.KeyPrefix = v; return nil },
		"max_bytes":        func(v string) error { return setSize(&r.MaxBytes, v) },
		"tenant_max_bytes": func(v string) error { return setSize(&r.TenantMaxBytes, v) },
		"min_replicas":     func(v string) error { return setInt(&r.MinReplicas, v, 0) },
		"op_timeout":       func(v string) error { return setDuration(&r.OpTimeout, v) },
	})
	if err != nil {
		return err
	}
	if err := r.Validate(); err != nil {
		return d.Err(err.Error())
	}
	return nil
}

// Interface guards
var (
	_ VaultBackend          = (*RedisVault)(nil)
	_ caddy.Provisioner     = (*RedisVault)(nil)
	_ caddy.Validator       = (*RedisVault)(nil)
	_ caddyfile.Unmarshaler = (*RedisVault)(nil)
)
