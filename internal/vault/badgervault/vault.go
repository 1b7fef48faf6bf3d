package badgervault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// maxArtifactLimit clamps MaxArtifactBytes so that one artifact always fits a
// value-log file (Badger refuses values larger than ValueLogFileSize, which
// itself must stay below 2 GiB).
const maxArtifactLimit int64 = 256 << 20

// Config configures Open.
type Config struct {
	// Dir is the database directory. It is created with mode 0700, and an
	// existing directory is chmod'ed to 0700: it holds tool output.
	Dir string
	// MaxBytes caps the total stored artifact bytes (Text+Raw). Default 512 MiB.
	MaxBytes int64
	// MaxArtifactBytes caps one artifact (Text+Raw). Default 8 MiB; values
	// above 256 MiB are clamped (and logged) to fit a value-log file.
	MaxArtifactBytes int64
	// Retention is the lineage TTL and the window in which a seen artifact is
	// never evicted. Default 7 days.
	Retention time.Duration
	// Logger receives warnings and errors (Badger's included). Nil means none.
	Logger *zap.Logger
	// TenantMaxBytes caps one tenant's stored artifact bytes (Text+Raw), so
	// that one tenant cannot fill the vault and turn compilation off for
	// everyone. A tenant at its quota evicts its own least recently seen
	// artifacts outside Retention first, then gets ErrFull; other tenants
	// are unaffected. Default MaxBytes/4; values above MaxBytes mean
	// MaxBytes (no per-tenant limit).
	TenantMaxBytes int64
	// MoveAsideDamaged makes Open answer a damaged database (ErrDamaged) by
	// renaming Dir to <Dir>.damaged-<UTC time> and starting an empty vault
	// there, instead of failing. What the fresh vault no longer has (the
	// moved directory still holds it, for recovery by hand): every stored
	// artifact, so receipts already sent that name them cannot be restored
	// by this gateway; all lineage, so conversations inline their results
	// again as new ones do; and the vault's own tenant key, so tenant ids
	// change unless the gateway is given its tenant key. Dir must be
	// renamable (not itself a mount point), or Open fails as without it.
	MoveAsideDamaged bool

	// Test hooks.
	now           func() time.Time
	maintainEvery time.Duration
	freeSpace     func(dir string) (int64, bool, error)
	diskFresh     bool  // measure free space on every check, for freeSpace
	scrubRate     int64 // content bytes per second the scrub reads
	scrubEvery    time.Duration
	syncFile      func(path string) error
}

// Store is the Badger-backed vault. It implements artifact.Store and is safe
// for concurrent use.
type Store struct {
	db         *badger.DB
	dir        string
	log        *zap.Logger
	hmacKey    []byte
	maxBytes   atomic.Int64 // capacity; SetLimits changes it while open
	maxTenant  atomic.Int64 // tenant quota; SetLimits changes it while open
	maxArt     int64
	vlogSize   int64
	retention  time.Duration
	touchAfter time.Duration
	now        func() time.Time
	disk       *diskGuard
	scrubRate  int64
	scrubEvery time.Duration
	syncFile   func(path string) error // fsyncs a file by name (durable.go)

	// bytes is stored Text+Raw bytes plus lineage bytes, including
	// reservations in flight; tenants holds the same per tenant (artifacts
	// only) and lineage the lineage part.
	bytes    atomic.Int64
	lineage  atomic.Int64
	tenants  tenantUsage
	count    atomic.Int64
	written  atomic.Uint64
	verified atomic.Uint64
	evicted  atomic.Uint64
	corrupt  atomic.Uint64
	// checked holds the artifacts whose content this process has read and
	// found intact, so Missing reads each record once, not on every request,
	// and vouches for recent ones without a read (integrity.go).
	checked verifiedSet
	// deletes is held for writing by every transaction that deletes an
	// artifact, which bumps deleteGen before releasing it; for reading
	// while deleteGen is read. An entry of checked recorded at the current
	// generation therefore names a record that is still stored.
	deletes   sync.RWMutex
	deleteGen uint64
	// syncs lets concurrent Persists share one db.Sync (group commit).
	syncs syncGroup
	// unsynced holds the artifacts a write has committed but not yet seen
	// synced and read back: verify waits for a sync before it confirms one.
	unsynced pendingSet
	// nextEvict is the earliest unix-nano time at which any stored artifact
	// can leave its retention window; until then a full vault fails fast
	// instead of rescanning metadata on every request.
	nextEvict atomic.Int64
	evictMu   sync.Mutex
	// ledger is the request ledger's size (ledger.go).
	ledger ledgerState
	// newTenants counts the tenants verified in the current minute (verified.go).
	newTenants newTenantRate

	mu     sync.RWMutex // held for reading by operations, for writing by Close
	closed bool
	stop   chan struct{}
	done   chan struct{}
}

var _ artifact.Store = (*Store)(nil)

// badgerOptions tunes Badger for a small, steady footprint rather than
// throughput; the vault sees one small batch per request.
//
//   - MemTableSize 4 MiB, NumMemtables 2: at most ~8 MiB of memtables
//     (default 64 MiB x 5; larger memtables raise the peak heap under
//     concurrent cold requests). A batch is capped at 15% of a
//     memtable (600 KiB of keys and small values), which is ample because
//     content lives in the value log: a 256-artifact chunk is ~50 KiB.
//   - NumLevelZeroTables 2, NumLevelZeroTablesStall 4: flush small L0 early.
//   - BlockCacheSize 8 MiB, IndexCacheSize 4 MiB: bounded caches (default
//     256 MiB block cache, unbounded index cache). Lookups are point reads
//     of metadata and lineage keys; bloom filters make misses cheap.
//   - ValueThreshold 1 KiB: artifact content (normally >= 8000 chars) goes to
//     the value log and the LSM holds only keys, metadata and lineage, so
//     compaction never rewrites content.
//   - ValueLogFileSize 64 MiB (raised to 2x MaxArtifactBytes if needed):
//     small files let value-log GC reclaim evicted content in small steps.
//   - NumCompactors 2: the minimum Badger supports; the host has few cores.
//   - SyncWrites false: Persist calls db.Sync once per request after its
//     batch, so lineage records and last-seen bumps never pay for an fsync.
//   - MetricsEnabled false: no global expvar maps.
//   - VerifyValueChecksum true: a value read from a damaged value log
//     fails its entry checksum, and Badger releases the log's read lock
//     on that path; without it, an entry header that decodes to more
//     bytes than the entry has ("Invalid read") returns without releasing
//     it, and Close (a reload, a shutdown) then waits for ever. The
//     checksum is a CRC32-C of the value, far cheaper than the vault's
//     own content check that follows.
//   - Logger: Badger's warnings and errors go to zap; info/debug dropped.
func badgerOptions(dir string, vlog int64, log *zap.Logger) badger.Options {
	return badger.DefaultOptions(dir).
		WithMemTableSize(4 << 20).
		WithNumMemtables(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(4).
		WithBlockCacheSize(8 << 20).
		WithIndexCacheSize(4 << 20).
		WithValueThreshold(1 << 10).
		WithValueLogFileSize(vlog).
		WithNumCompactors(2).
		WithSyncWrites(false).
		WithMetricsEnabled(false).
		WithVerifyValueChecksum(true).
		WithLogger(badgerLogger{log.Sugar()})
}

// vlogFileSize is 64 MiB, raised to 2x maxArt so one artifact always fits.
func vlogFileSize(maxArt int64) int64 {
	return max(64<<20, 2*maxArt)
}

// Open opens (creating if needed) the vault in cfg.Dir. Only one Store may
// have a directory open at a time; Badger holds a directory lock.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, errors.New("vault: no directory")
	}
	cfg = cfg.withDefaults()
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	// MkdirAll leaves an existing directory's mode alone.
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("vault: %w", err)
	}
	vlogSize := vlogFileSize(cfg.MaxArtifactBytes)
	opt := badgerOptions(cfg.Dir, vlogSize, cfg.Logger)
	disk := newDiskGuard(cfg.Dir, diskOptions{memTableSize: opt.MemTableSize, numMemtables: opt.NumMemtables}, cfg.freeSpace, cfg.Logger)
	disk.fresh = cfg.diskFresh
	db, err := openDB(cfg, opt, disk)
	if err != nil {
		return nil, err
	}
	s := &Store{
		db:         db,
		dir:        cfg.Dir,
		log:        cfg.Logger,
		maxArt:     cfg.MaxArtifactBytes,
		vlogSize:   vlogSize,
		disk:       disk,
		scrubRate:  cfg.scrubRate,
		scrubEvery: cfg.scrubEvery,
		syncFile:   cfg.syncFile,
		retention:  cfg.Retention,
		// Bumping last-seen on every hit would turn each warm request into a
		// write; a coarse bump is enough while it stays well inside Retention.
		touchAfter: min(time.Minute, cfg.Retention/4),
		now:        cfg.now,
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
		checked:    verifiedSet{max: maxVerified},
	}
	s.SetLimits(cfg.MaxBytes, cfg.TenantMaxBytes)
	if err := s.loadHMACKey(); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.scanSizes(); err != nil {
		db.Close()
		return nil, err
	}
	disk.fillBallast()
	go s.maintain(cfg.maintainEvery)
	return s, nil
}

// withDefaults returns cfg with every zero (or negative) field set to its
// default, and MaxArtifactBytes clamped to what a value-log file holds.
func (cfg Config) withDefaults() Config {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = vault.DefaultMaxBytes
	}
	if cfg.MaxArtifactBytes <= 0 {
		cfg.MaxArtifactBytes = vault.DefaultMaxArtifactBytes
	}
	if cfg.Retention <= 0 {
		cfg.Retention = vault.DefaultRetention
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.MaxArtifactBytes > maxArtifactLimit {
		// Callers derive this from a body-size limit; larger artifacts are
		// refused with ErrTooLarge rather than refusing to start.
		cfg.Logger.Warn("vault max artifact bytes clamped",
			zap.Int64("configured", cfg.MaxArtifactBytes), zap.Int64("limit", maxArtifactLimit))
		cfg.MaxArtifactBytes = maxArtifactLimit
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.maintainEvery <= 0 {
		cfg.maintainEvery = 10 * time.Minute
	}
	if cfg.TenantMaxBytes <= 0 {
		cfg.TenantMaxBytes = cfg.MaxBytes / 4
	}
	cfg.TenantMaxBytes = min(cfg.TenantMaxBytes, cfg.MaxBytes)
	if cfg.scrubRate <= 0 {
		cfg.scrubRate = defaultScrubRate
	}
	if cfg.scrubEvery <= 0 {
		cfg.scrubEvery = defaultScrubEvery
	}
	if cfg.syncFile == nil {
		cfg.syncFile = syncFile
	}
	return cfg
}

// SetLimits changes the capacity and the tenant quota of the open vault,
// with Open's defaults for values of 0 or less (a quota of max/4, at most
// max). The new limits apply to the next reservation: a tenant or a vault
// over a lowered limit evicts (outside Retention) or gets ErrFull on its
// next write, and the periodic maintenance evicts down to 90% of the new
// capacity. Nothing stored is lost by the change itself.
func (s *Store) SetLimits(maxBytes, tenantMaxBytes int64) {
	if maxBytes <= 0 {
		maxBytes = vault.DefaultMaxBytes
	}
	if tenantMaxBytes <= 0 {
		tenantMaxBytes = maxBytes / 4
	}
	tenantMaxBytes = min(tenantMaxBytes, maxBytes)
	s.maxBytes.Store(maxBytes)
	s.maxTenant.Store(tenantMaxBytes)
}

// scanSizes recomputes the in-memory totals from metadata and lineage keys
// only.
func (s *Store) scanSizes() error {
	var n, total int64
	per := map[string]int64{}
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 256, Prefix: []byte("m/")})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var m vault.Meta
			if err := it.Item().Value(func(v []byte) error { return m.Decode(v) }); err != nil {
				return err
			}
			n++
			total += m.Size()
			per[tenantOfKey(it.Item().Key())] += m.Size()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("vault: scan: %w", err)
	}
	lin, err := s.lineageSize()
	if err != nil {
		return fmt.Errorf("vault: scan: %w", err)
	}
	s.count.Store(n)
	s.bytes.Store(total + lin)
	s.lineage.Store(lin)
	s.tenants.reset(per)
	return nil
}

// Close stops background maintenance and closes the database. Operations
// running when Close is called finish first; later ones get ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	// Badger flushes the memtable at Close, through a memory map: if the
	// disk has filled since the last write, the ballast makes its room.
	if s.disk.checkNow(0) != nil {
		s.disk.releaseBallast()
	}
	return s.db.Close()
}

// enter guards an operation against a concurrent Close.
func (s *Store) enter() (func(), error) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, vault.ErrClosed
	}
	return s.mu.RUnlock, nil
}

// Stats returns a snapshot of sizes and counters.
func (s *Store) Stats() vault.Stats {
	st := vault.Stats{
		Artifacts: s.count.Load(),
		Bytes:     s.bytes.Load(),
		Lineage:   s.lineage.Load(),
		MaxBytes:  s.maxBytes.Load(),
		Written:   s.written.Load(),
		Verified:  s.verified.Load(),
		Evicted:   s.evicted.Load(),
		Corrupt:   s.corrupt.Load(),
		Syncs:     s.syncs.runs.Load(),
	}
	if release, err := s.enter(); err == nil {
		st.LSMBytes, st.VlogBytes = s.db.Size()
		release()
	}
	return st
}

// maxRetries bounds optimistic-transaction retries on ErrConflict.
const maxRetries = 8

// deleting runs fn, a transaction that may delete artifacts, alone among
// deletions and vouchers (verify holds deletes for reading while it
// vouches), and bumps the deletion generation after it when fn reports
// that it deleted something, so no entry of checked recorded before the
// deletion committed vouches for what it deleted.
func (s *Store) deleting(fn func() (deleted bool, err error)) error {
	s.deletes.Lock()
	defer s.deletes.Unlock()
	deleted, err := fn()
	if deleted {
		s.deleteGen++
	}
	return err
}

// deletionGen is the current deletion generation.
func (s *Store) deletionGen() uint64 {
	s.deletes.RLock()
	defer s.deletes.RUnlock()
	return s.deleteGen
}

// update runs fn in a read-write transaction, retrying on conflicts. fn must
// be safe to run again from scratch. It refuses with ErrFull when the disk
// is too full for Badger to write safely (see diskGuard); a small
// transaction's own bytes are covered by the guard's slack.
func (s *Store) update(ctx context.Context, fn func(*badger.Txn) error) error {
	if err := s.disk.check(0); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		err := s.db.Update(fn)
		if !errors.Is(err, badger.ErrConflict) || attempt == maxRetries {
			return noSpaceIsFull(err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// maintain periodically, until Close: recounts lineage (its records expire
// by TTL, unseen by the counters), evicts expired artifacts down to 90% of
// the cap, scrubs stored content (on the first pass, then every
// scrubEvery) and runs value-log GC while the disk has room for it (GC
// rewrites up to one value-log file).
func (s *Store) maintain(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	var scrubbed time.Time
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.disk.fillBallast()
		s.recountLineage()
		s.evict(0, s.maxBytes.Load()/10)
		if time.Since(scrubbed) >= s.scrubEvery {
			s.scrub()
			scrubbed = time.Now()
		}
		for s.disk.check(s.vlogSize) == nil && s.db.RunValueLogGC(0.5) == nil {
			select {
			case <-s.stop:
				return
			default:
			}
		}
	}
}

// badgerLogger forwards Badger's warnings and errors to zap. Badger's messages
// name files and key counts, never values.
type badgerLogger struct{ l *zap.SugaredLogger }

func (b badgerLogger) Errorf(f string, a ...any) {
	b.l.Error(strings.TrimSpace(fmt.Sprintf(f, a...)))
}

func (b badgerLogger) Warningf(f string, a ...any) {
	b.l.Warn(strings.TrimSpace(fmt.Sprintf(f, a...)))
}

func (badgerLogger) Infof(string, ...any)  {}
func (badgerLogger) Debugf(string, ...any) {}
