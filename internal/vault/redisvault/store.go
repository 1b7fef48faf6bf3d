// Package redisvault is a vault backend on Redis (or Valkey), for a fleet of
// gateways behind one load balancer: every replica sees the same artifacts,
// lineage, capacity and tenant key, so a conversation whose requests land on
// different replicas keeps its leases and any receipt can be recovered on
// any replica. It implements vault.Backend and passes vault/storetest, the
// suite Badger passes.
//
// Durability in Redis terms: a new artifact counts as durable once written,
// read back byte for byte and, with MinReplicas, acknowledged by WAIT. The
// server must not evict keys (maxmemory-policy noeviction, checked before
// first use) and should persist them (appendonly yes). Capacity is accounted
// in Redis and shared by the fleet; eviction follows the Badger rules (least
// recently seen first, never inside the retention window), and one tenant
// over TenantMaxBytes evicts its own artifacts first, then gets
// artifact.ErrFull.
//
// Fail open: an unreachable, slow or erroring server makes calls fail within
// OpTimeout (the compiler then forwards the original request), and the store
// recovers by itself when the server is back; Open does not need the server
// to be up. Keys hold content only in artifact values; errors and logs name
// digest prefixes and sizes, never content, tool arguments or the URL.
package redisvault

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

var (
	// ErrEvictingPolicy means the server's maxmemory-policy could evict
	// vault keys (anything but noeviction): receipts could then name lost
	// content.
	ErrEvictingPolicy = errors.New("redisvault: server may evict keys")
	// ErrNotReplicated means fewer than MinReplicas replicas acknowledged
	// a write within the operation's time.
	ErrNotReplicated = errors.New("redisvault: write not acknowledged by enough replicas")
)

// Store is the Redis-backed vault. It is safe for concurrent use, and any
// number of Stores (replicas of a fleet) may share one server and prefix.
type Store struct {
	rdb        redis.UniversalClient // *redis.Client, or *redis.ClusterClient with Config.Cluster
	k          keys
	log        *zap.Logger
	limits     atomic.Pointer[limits] // SetLimits changes them while open
	maxArt     int64
	retention  time.Duration
	touchAfter time.Duration
	now        func() time.Time

	// ready is set once the server's eviction policy was found safe; until
	// then every call checks it first (the server may be down at Open).
	ready atomic.Bool

	keyMu     sync.Mutex
	tenantKey []byte // cached after the first successful TenantKey

	// nextEvict (unix ms) is the earliest time any artifact can leave its
	// retention window, as of this store's last fruitless eviction scan;
	// until then a full vault fails fast instead of rescanning.
	nextEvict atomic.Int64
	evictMu   sync.Mutex

	counts counters // activity since Open, for Stats (stats.go)
	sizes  sizes    // the fleet-wide sizes Stats last read

	mu     sync.RWMutex // held for reading by calls, for writing by Close
	closed bool
}

var _ vault.Backend = (*Store)(nil)

// Open connects to cfg.URL. It refuses a bad configuration, or a reachable
// server whose maxmemory-policy would evict keys (the error names the
// policy). An unreachable server is not an error: the store starts, calls
// fail until the server answers, and the policy is checked then.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rdb, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	s := &Store{
		rdb:        rdb,
		k:          keys{prefix: cfg.KeyPrefix},
		log:        cfg.Logger,
		maxArt:     cfg.MaxArtifactBytes,
		retention:  cfg.Retention,
		touchAfter: min(time.Minute, cfg.Retention/4), // as Badger: a coarse bump, well inside Retention
		now:        cfg.Now,
	}
	s.limits.Store(&limits{maxBytes: cfg.MaxBytes, tenantMax: cfg.TenantMaxBytes, minRepl: cfg.MinReplicas, opTimeout: cfg.OpTimeout})
	octx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
	defer cancel()
	if err := s.checkServer(octx); err != nil {
		// A server that answers but refuses is misconfiguration: name it.
		// One that does not answer is runtime state: start anyway.
		if errors.Is(err, ErrEvictingPolicy) || refusedCredentials(err) {
			s.rdb.Close()
			return nil, err
		}
		s.log.Warn("redis vault not reachable at start; requests pass through until it is", zap.Error(err))
	}
	return s, nil
}

// limits are the settings an open Store may change (SetLimits).
type limits struct {
	maxBytes, tenantMax int64
	minRepl             int
	opTimeout           time.Duration
}

func (s *Store) lim() *limits { return s.limits.Load() }

// Limits are the settings of an open Store that SetLimits changes; zero
// fields take Open's defaults (TenantMaxBytes: MaxBytes/4).
type Limits struct {
	MaxBytes       int64
	TenantMaxBytes int64
	MinReplicas    int
	OpTimeout      time.Duration
}

// SetLimits changes the fleet's capacity, the tenant quota, the replicas
// WAIT asks for and the bound on each call, on the open store: the next
// call uses them. The capacity is accounted in Redis and checked against
// this store's own setting, so every replica of a fleet should be given
// the same limits. A lowered quota or capacity evicts (outside retention)
// or refuses on the next write; nothing stored is lost by the change
// itself. The connection's dial, read and write timeouts keep the
// op_timeout the store opened with (each round trip's bound); the new
// OpTimeout bounds every call as a whole. Bad values are refused and
// leave the limits as they were.
func (s *Store) SetLimits(l Limits) error {
	cfg, err := Config{URL: "-", MaxBytes: l.MaxBytes, TenantMaxBytes: l.TenantMaxBytes, MinReplicas: l.MinReplicas, OpTimeout: l.OpTimeout}.withDefaults()
	if err != nil {
		return err
	}
	s.limits.Store(&limits{maxBytes: cfg.MaxBytes, tenantMax: cfg.TenantMaxBytes, minRepl: cfg.MinReplicas, opTimeout: cfg.OpTimeout})
	return nil
}

// newClient builds the client for cfg: every call bounded by its context,
// no retries of our own (the compiler passes the request through on any
// error, and a retried reservation would count twice), RESP2, no
// per-connection CLIENT SETINFO or maintenance-notification handshakes.
func newClient(cfg Config) (redis.UniversalClient, error) {
	// The parsers' messages may quote the URL, which can hold a password.
	badURL := ErrBadURL
	if cfg.Cluster {
		opts, err := redis.ParseClusterURL(cfg.URL)
		if err != nil {
			return nil, badURL
		}
		opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = cfg.OpTimeout, cfg.OpTimeout, cfg.OpTimeout, cfg.OpTimeout
		opts.ContextTimeoutEnabled = true
		opts.MaxRetries = -1
		opts.Protocol = 2
		opts.DisableIdentity = true
		opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		return redis.NewClusterClient(opts), nil
	}
	opts, err := redis.ParseURL(cfg.URL)
	if err != nil {
		return nil, badURL
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout, opts.PoolTimeout = cfg.OpTimeout, cfg.OpTimeout, cfg.OpTimeout, cfg.OpTimeout
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = -1
	opts.Protocol = 2
	opts.DisableIdentity = true
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return redis.NewClient(opts), nil
}

// node returns the client of the server holding key: the store's client,
// or on a cluster the master of key's slot. A pipeline that ends in WAIT
// runs on it, since WAIT acknowledges its own connection's writes.
func (s *Store) node(ctx context.Context, key string) (*redis.Client, error) {
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("redisvault: %w", err)
		}
		return n, nil
	case *redis.Client:
		return c, nil
	}
	return nil, errors.New("redisvault: unknown client")
}

// isReply reports whether err is the server's error reply.
func isReply(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// refusedCredentials reports whether the server rejected the URL's
// credentials (a server error reply, not a network failure).
func refusedCredentials(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") || strings.Contains(msg, "invalid password")
}

// checkServer verifies the server's eviction policy once.
func (s *Store) checkServer(ctx context.Context) error {
	if s.ready.Load() {
		return nil
	}
	policy, err := s.evictionPolicy(ctx)
	if err != nil {
		return fmt.Errorf("redisvault: %w", err)
	}
	if policy != "noeviction" {
		return fmt.Errorf("%w: maxmemory-policy is %q; set it to noeviction", ErrEvictingPolicy, policy)
	}
	s.ready.Store(true)
	return nil
}

// evictionPolicy reads maxmemory-policy (of every master on a cluster): the
// first one that is not noeviction, else noeviction.
func (s *Store) evictionPolicy(ctx context.Context) (string, error) {
	c, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return nodePolicy(ctx, s.rdb)
	}
	var mu sync.Mutex
	worst := "noeviction"
	err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		p, err := nodePolicy(ctx, n)
		mu.Lock()
		if err == nil && p != "noeviction" {
			worst = p
		}
		mu.Unlock()
		return err
	})
	return worst, err
}

// nodePolicy reads one server's maxmemory-policy from INFO (allowed on most
// managed servers), else from CONFIG GET.
func nodePolicy(ctx context.Context, c redis.Cmdable) (string, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil && !isReply(err) {
		return "", err // unreachable; a refusal (ACL, renamed command) tries CONFIG GET
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "maxmemory_policy:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	kv, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return "", fmt.Errorf("cannot read maxmemory-policy: %w", err)
	}
	if v, ok := kv["maxmemory-policy"]; ok {
		return v, nil
	}
	return "", errors.New("cannot read maxmemory-policy")
}

// call guards a Store call: it fails after Close, bounds the call by
// OpTimeout and checks the server before first use.
func (s *Store) call(ctx context.Context) (context.Context, func(), error) {
	return s.callWithin(ctx, s.lim().opTimeout)
}

// callWithin is call with its own bound (Search reads many records).
func (s *Store) callWithin(ctx context.Context, timeout time.Duration) (context.Context, func(), error) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, nil, vault.ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	done := func() { cancel(); s.mu.RUnlock() }
	if err := s.checkServer(ctx); err != nil {
		done()
		return nil, nil, err
	}
	return ctx, done, nil
}

// Close closes the connections. Calls running when Close is called finish
// first; later ones get vault.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.rdb.Close()
}

// TenantKey returns the fleet's tenant key: 32 random bytes created with SET
// NX by the first store to ask, so every store on the server computes the
// same tenants.
func (s *Store) TenantKey(ctx context.Context) ([]byte, error) {
	ctx, done, err := s.call(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	s.keyMu.Lock()
	defer s.keyMu.Unlock()
	if s.tenantKey != nil {
		return bytes.Clone(s.tenantKey), nil
	}
	fresh := make([]byte, 32)
	rand.Read(fresh)
	key := s.k.global("tenantkey")
	node, err := s.node(ctx, key)
	if err != nil {
		return nil, err
	}
	var get *redis.StringCmd
	var wait *redis.Cmd
	_, err = node.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.SetNX(ctx, key, fresh, 0)
		get = p.Get(ctx, key)
		wait = s.queueWait(ctx, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redisvault: tenant key: %w", err)
	}
	got, _ := get.Bytes()
	if len(got) != 32 {
		return nil, fmt.Errorf("redisvault: tenant key has %d bytes, want 32", len(got))
	}
	if err := s.checkWait(wait); err != nil {
		return nil, err
	}
	s.tenantKey = got
	return bytes.Clone(got), nil
}

// queueWait queues WAIT on p when MinReplicas is set (nil otherwise). WAIT
// acknowledges the writes of its own connection, so it must share the
// pipeline that wrote.
func (s *Store) queueWait(ctx context.Context, p redis.Pipeliner) *redis.Cmd {
	if s.lim().minRepl == 0 {
		return nil
	}
	return p.Do(ctx, "WAIT", s.lim().minRepl, s.waitTimeout(ctx).Milliseconds())
}

// checkWait reports whether the queued WAIT saw enough replicas.
func (s *Store) checkWait(wait *redis.Cmd) error {
	if wait == nil {
		return nil
	}
	n, err := wait.Int64()
	if err != nil {
		return fmt.Errorf("redisvault: wait: %w", err)
	}
	if n < int64(s.lim().minRepl) {
		return fmt.Errorf("%w: %d of %d", ErrNotReplicated, n, s.lim().minRepl)
	}
	return nil
}

// waitTimeout is WAIT's server-side timeout. The server checks it only on
// its cron tick (every 100ms at the default hz 10), so WAIT may answer up to
// a tick late: take half of what is left of ctx minus a tick, at least a
// millisecond (0 would mean forever).
func (s *Store) waitTimeout(ctx context.Context) time.Duration {
	left := s.lim().opTimeout
	if dl, ok := ctx.Deadline(); ok {
		left = time.Until(dl)
	}
	return max(time.Millisecond, left/2-100*time.Millisecond)
}

func (s *Store) nowMS() int64 { return s.now().UnixMilli() }
