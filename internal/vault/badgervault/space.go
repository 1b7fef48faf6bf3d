package badgervault

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// Badger writes its memtable logs, value logs and tables through memory maps
// of files it creates sparse (sized with ftruncate, no blocks allocated).
// When the file system has no block left for a page Badger dirties, the
// kernel raises SIGBUS, which Go cannot recover: the whole process dies, and
// dies again at the next start while the disk stays full (the first memtable
// flush at open writes a table the same way). Write errors cannot be caught
// after the fact, so the vault refuses to start a write unless the disk has
// room for it plus everything Badger may write on its own before the next
// check:
//
//   - every memtable flushed to a table (NumMemtables x MemTableSize);
//   - one compaction rewriting the whole LSM tree (it writes the new tables
//     before deleting the old; the LSM holds keys, metadata and lineage,
//     not content, so it stays small);
//   - slack for small transactions (last-seen bumps, lineage, deletions),
//     the DISCARD file and the headers of new memtable and value-log files.
//
// A refused write is ErrFull, so the request passes through; the check runs
// before every write, so the vault resumes by itself once space returns.
// Value-log GC rewrites up to one value-log file and is checked for that.
//
// A statfs per write is a syscall on every request's path, so a measure is
// reused while it is younger than recheckAfter and the writes admitted
// since (counted against it) stay under recheckBytes, and only while it
// leaves recheckBytes beyond the write and the reserve: near the line every
// write measures, so the vault's own writes are refused exactly as without
// the reuse, and another process has to write recheckBytes within
// recheckAfter to reach the reserve before the next measure sees it.
//
// The check cannot stop another process from filling the disk after it,
// while the memtable still holds writes that Badger flushes later (in the
// background, or at Close: a reload or shutdown). For that the vault keeps
// a ballast file of the same size as the memtable part of the reserve, with
// its blocks allocated: when a check finds less than that free, or Close
// does, the ballast is deleted, which gives the flush its room back. It is
// allocated again when the disk has room for it beyond the reserve.
const diskSlack = 4 << 20

// ballastFile is the ballast's name inside the database directory (Badger
// ignores files it does not know).
const ballastFile = "tt-disk-ballast"

// lsmRescan is how often the guard re-reads the LSM size from the
// directory. Badger's own estimate (DB.Size) is only kept with metrics on,
// which the vault turns off; the LSM grows by at most a few memtable
// flushes in this time, which the fixed part of the reserve covers.
const lsmRescan = 10 * time.Second

// The bounds on reusing a free-space measure (see above). smallWrite is
// what a transaction without a stated size (lineage, last-seen bumps) is
// counted as.
const (
	recheckAfter = 100 * time.Millisecond
	recheckBytes = 8 << 20
	smallWrite   = 4 << 10
)

// diskGuard checks free space before writes and owns the ballast.
type diskGuard struct {
	dir   string
	fixed int64 // memtable flushes + slack; also the ballast's size
	free  func(dir string) (int64, bool, error)
	log   *zap.Logger
	clock func() int64 // unix nanoseconds
	fresh bool         // measure on every check (tests that script free space)

	lsmBytes atomic.Int64 // tables on disk, as of lsmAt
	lsmAt    atomic.Int64 // unix nanoseconds of the last scan

	mu       sync.Mutex
	measured int64 // bytes free at measuredAt; valid when measuredAt != 0
	// measuredAt is the unix nanoseconds of the last statfs.
	measuredAt int64
	admitted   int64 // bytes admitted since measuredAt without a statfs
}

func newDiskGuard(dir string, opt diskOptions, free func(string) (int64, bool, error), log *zap.Logger) *diskGuard {
	if free == nil {
		free = freeBytes
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &diskGuard{
		dir:   dir,
		fixed: int64(opt.numMemtables)*opt.memTableSize + diskSlack,
		free:  free,
		log:   log,
		clock: func() int64 { return time.Now().UnixNano() },
	}
}

// diskOptions are the Badger sizes the reserve derives from.
type diskOptions struct {
	memTableSize int64
	numMemtables int
}

// reserve is what must stay free besides a write's own bytes.
func (g *diskGuard) reserve() int64 { return g.fixed + g.lsm() }

// lsm returns the tables' size on disk, rescanned every lsmRescan.
func (g *diskGuard) lsm() int64 {
	now := time.Now().UnixNano()
	if at := g.lsmAt.Load(); now-at >= int64(lsmRescan) && g.lsmAt.CompareAndSwap(at, now) {
		g.lsmBytes.Store(lsmOnDisk(g.dir))
	}
	return g.lsmBytes.Load()
}

// check returns ErrFull unless the disk has need bytes free beyond the
// reserve, from a recent measure when one allows it (admitRecent), else
// from a new one. Where free space cannot be measured (no statfs), it
// allows.
func (g *diskGuard) check(need int64) error {
	if g.admitRecent(need) {
		return nil
	}
	return g.checkNow(need)
}

// admitRecent admits need without a statfs when the last measure is
// younger than recheckAfter, the writes admitted since it stay under
// recheckBytes, and it leaves recheckBytes beyond them, need and the
// reserve; need is then counted against the measure.
func (g *diskGuard) admitRecent(need int64) bool {
	if g.fresh {
		return false
	}
	need = max(need, smallWrite)
	r := g.reserve()
	now := g.clock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.measuredAt == 0 || now-g.measuredAt >= int64(recheckAfter) || now < g.measuredAt ||
		g.admitted+need >= recheckBytes || g.measured-g.admitted-need < r+recheckBytes {
		return false
	}
	g.admitted += need
	return true
}

// remember keeps free, measured at now before a write of need bytes, for
// admitRecent; the write is counted against it (also when it is refused:
// the count only errs towards measuring sooner). A failed or impossible
// measure (ok false) keeps nothing.
func (g *diskGuard) remember(free int64, ok bool, now, need int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.measured, g.measuredAt, g.admitted = free, 0, max(need, smallWrite)
	if ok {
		g.measuredAt = now
	}
}

// checkNow is check from a new measure: Close and open use it, since the
// ballast's release depends on it.
func (g *diskGuard) checkNow(need int64) error {
	now := g.clock()
	free, ok, err := g.free(g.dir)
	g.remember(free, ok && err == nil, now, need)
	if err != nil {
		return fmt.Errorf("vault: free space: %w", err)
	}
	if !ok {
		return nil
	}
	if free < g.fixed {
		g.releaseBallast() // someone else is filling the disk: give flushes room
	}
	if r := g.reserve(); free < need+r {
		return fmt.Errorf("%w: disk has %d bytes free, a write needs %d plus a reserve of %d", vault.ErrFull, free, need, r)
	}
	return nil
}

// releaseBallast deletes the ballast, if there is one.
func (g *diskGuard) releaseBallast() {
	err := os.Remove(filepath.Join(g.dir, ballastFile))
	if err == nil {
		g.log.Warn("vault disk nearly full: ballast released for Badger's flushes", zap.Int64("bytes", g.fixed))
	} else if !errors.Is(err, fs.ErrNotExist) {
		g.log.Warn("vault ballast", zap.Error(err))
	}
}

// fillBallast allocates the ballast when it is missing and the disk has
// room for it beyond the reserve. Failing only narrows the margin, so it is
// logged, never returned.
func (g *diskGuard) fillBallast() {
	path := filepath.Join(g.dir, ballastFile)
	if fi, err := os.Stat(path); err == nil && fi.Size() == g.fixed {
		return
	}
	free, ok, err := g.free(g.dir)
	if err != nil || !ok || free < g.fixed+g.reserve() {
		return
	}
	if err := allocateFile(path, g.fixed); err != nil {
		os.Remove(path)
		g.log.Warn("vault ballast not allocated", zap.Error(err))
	}
}

// noSpaceIsFull makes a write that failed for lack of space (in a file
// Badger writes with write(2), such as the MANIFEST) ErrFull, so the request
// passes through as vault_full. Badger formats some errors with %v, so the
// text is checked as well as the chain.
func noSpaceIsFull(err error) error {
	if err != nil && !errors.Is(err, vault.ErrFull) &&
		(errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), syscall.ENOSPC.Error())) {
		return fmt.Errorf("%w: %w", vault.ErrFull, err)
	}
	return err
}

// lsmOnDisk sums the sizes of dir's tables, for the reserve before Badger
// has opened (and so before it can estimate its own size).
func lsmOnDisk(dir string) int64 {
	var n int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".sst") {
			if fi, err := os.Stat(filepath.Join(dir, e.Name())); err == nil {
				n += fi.Size()
			}
		}
	}
	return n
}
