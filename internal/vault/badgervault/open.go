package badgervault

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/ristretto/v2/z"
	"go.uber.org/zap"
)

// ErrDamaged means the database directory is damaged: a MANIFEST that does
// not parse, a table it names that is missing or truncated, or tables and
// value logs without a MANIFEST. The error wraps the cause. The files are
// left exactly as they were, for inspection, unless Config.MoveAsideDamaged
// is set.
var ErrDamaged = errors.New("vault: damaged database")

// vlogHeaderSize is the header Badger writes at the start of every value-log
// and memtable file; a file no longer than it holds no values.
const vlogHeaderSize = 20

// dirFiles is what inspect finds in a database directory.
type dirFiles struct {
	tables   map[uint64]int64 // .sst id -> size
	vlogData int              // value-log files holding values
	memtabs  int              // memtable WAL files
	manifest bool
}

func listDir(dir string) (dirFiles, error) {
	f := dirFiles{tables: map[uint64]int64{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return f, err
	}
	for _, e := range ents {
		name := e.Name()
		ext := filepath.Ext(name)
		switch {
		case name == badger.ManifestFilename:
			f.manifest = true
		case ext == ".sst" || ext == ".vlog" || ext == ".mem":
			info, err := e.Info()
			if err != nil {
				return f, err
			}
			switch ext {
			case ".sst":
				id, err := strconv.ParseUint(strings.TrimSuffix(name, ext), 10, 64)
				if err != nil {
					return f, fmt.Errorf("%w %s: unexpected table file %s", ErrDamaged, dir, name)
				}
				f.tables[id] = info.Size()
			case ".vlog":
				if info.Size() > vlogHeaderSize {
					f.vlogData++
				}
			case ".mem":
				f.memtabs++
			}
		}
	}
	return f, nil
}

// inspect checks a database directory before Badger opens it, for the damage
// Badger would otherwise answer by losing data silently (a missing or
// truncated MANIFEST: Badger starts empty and deletes the tables it does not
// know) or by crashing (a truncated table panics in one of its goroutines,
// which no recover can catch). It reads and never changes anything.
func inspect(dir string, opt badger.Options, log *zap.Logger) error {
	files, err := listDir(dir)
	if err != nil {
		if errors.Is(err, ErrDamaged) {
			return err
		}
		return fmt.Errorf("vault: open %s: %w", dir, err)
	}
	if !files.manifest {
		if len(files.tables) > 0 || files.vlogData > 0 || files.memtabs > 0 {
			return fmt.Errorf("%w %s: MANIFEST missing but %d tables, %d value logs and %d memtables present",
				ErrDamaged, dir, len(files.tables), files.vlogData, files.memtabs)
		}
		return nil // a new database
	}
	mf, err := os.Open(filepath.Join(dir, badger.ManifestFilename))
	if err != nil {
		return fmt.Errorf("vault: open %s: %w", dir, err)
	}
	defer mf.Close()
	man, _, err := badger.ReplayManifestFile(mf, opt.ExternalMagicVersion, opt)
	if err != nil {
		return fmt.Errorf("%w %s: MANIFEST: %w", ErrDamaged, dir, err)
	}
	// Before its first flush a database names no tables; a crash during
	// that flush leaves a table behind with its memtable still present.
	if len(man.Tables) == 0 && len(files.tables) > 0 && files.memtabs == 0 {
		return fmt.Errorf("%w %s: MANIFEST names no tables but %d are present (truncated MANIFEST?)",
			ErrDamaged, dir, len(files.tables))
	}
	orphans := 0
	for id := range files.tables {
		if _, ok := man.Tables[id]; !ok {
			orphans++ // a table a crash left behind before the MANIFEST named it
		}
	}
	if orphans > 0 {
		log.Warn("vault tables not in MANIFEST will be deleted by Badger", zap.Int("tables", orphans))
	}
	for id := range man.Tables {
		size, ok := files.tables[id]
		if !ok {
			return fmt.Errorf("%w %s: table %d named by MANIFEST is missing", ErrDamaged, dir, id)
		}
		if size == 0 {
			return fmt.Errorf("%w %s: table %d is empty", ErrDamaged, dir, id)
		}
		if err := checkTable(filepath.Join(dir, fmt.Sprintf("%06d.sst", id)), opt); err != nil {
			return fmt.Errorf("%w %s: table %d: %w", ErrDamaged, dir, id, err)
		}
	}
	return nil
}

// checkTable opens a table read-only the way Badger will, with every block
// checksum verified, and turns the panics a damaged table raises inside
// Badger (in a goroutine of its own at open, where nothing can recover
// them) into an error here, where one can.
func checkTable(path string, opt badger.Options) (err error) {
	mf, err := z.OpenMmapFile(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer func() {
		if recover() != nil {
			err = errors.New("unreadable (Badger panics reading it)")
		}
	}()
	t, err := table.OpenTable(mf, table.Options{
		ReadOnly:           true,
		BlockSize:          opt.BlockSize,
		BloomFalsePositive: opt.BloomFalsePositive,
		ChkMode:            options.OnTableRead,
		Compression:        opt.Compression,
	})
	if err != nil {
		return err // OpenTable closed the map
	}
	// Close the map only: DecrRef would delete the file.
	return t.MmapFile.Close(-1)
}

// damageMarkers are the texts of Badger's open errors that mean the files
// themselves are bad (Badger formats most of them with %v, so errors.Is
// cannot see them). Anything else (a held lock, permissions, no memory) is
// not damage: moving the directory aside for it would lose a good database.
var damageMarkers = []string{
	"manifest has bad magic",
	"manifest has checksum mismatch",
	"manifest has unsupported version",
	"Manifest file might be corrupted",
	"file does not exist for table",
	"checksum mismatch",
	"failed to verify checksum",
	"Unable to parse log id",
	"Invalid key registry",
	"Encryption key mismatch",
	"varint overflows", // a value-log entry header that does not decode
}

// classifyOpenErr wraps Badger's open error in ErrDamaged when it reports
// damaged files.
func classifyOpenErr(dir string, err error) error {
	msg := err.Error()
	for _, m := range damageMarkers {
		if strings.Contains(msg, m) {
			return fmt.Errorf("%w %s: %w", ErrDamaged, dir, err)
		}
	}
	return fmt.Errorf("vault: open %s: %w", dir, err)
}

// moveAside renames a damaged directory to <dir>.damaged-<UTC time> and
// returns the new name; Open then starts a fresh database in dir.
func moveAside(dir string, now time.Time) (string, error) {
	aside := fmt.Sprintf("%s.damaged-%s", filepath.Clean(dir), now.UTC().Format("20060102T150405.000000000Z"))
	if err := os.Rename(dir, aside); err != nil {
		return "", err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return aside, err
	}
	return aside, nil
}

// openDB opens Badger in cfg.Dir after inspect and the disk check, moving a
// damaged directory aside first when cfg.MoveAsideDamaged is set.
func openDB(cfg Config, opt badger.Options, disk *diskGuard) (*badger.DB, error) {
	db, err := tryOpen(cfg.Dir, opt, disk, cfg.Logger)
	if err == nil || !errors.Is(err, ErrDamaged) || !cfg.MoveAsideDamaged {
		return db, err
	}
	aside, merr := moveAside(cfg.Dir, cfg.now())
	if merr != nil {
		return nil, fmt.Errorf("%w (moving it aside failed: %v)", err, merr)
	}
	cfg.Logger.Error("vault damaged: moved aside, starting empty",
		zap.String("moved_to", aside), zap.Error(err))
	return tryOpen(cfg.Dir, opt, disk, cfg.Logger)
}

func tryOpen(dir string, opt badger.Options, disk *diskGuard, log *zap.Logger) (*badger.DB, error) {
	if err := inspect(dir, opt, log); err != nil {
		return nil, err
	}
	// At open Badger replays and flushes memtables and creates a memtable
	// and a value-log file, all through memory maps: on a full disk it
	// would die of SIGBUS, so it is not started at all.
	if err := disk.checkNow(0); err != nil {
		return nil, fmt.Errorf("vault: open %s: %w", dir, err)
	}
	mems := memtables(dir)
	db, err := badger.Open(opt)
	if err != nil {
		err = classifyOpenErr(dir, err)
		if errors.Is(err, ErrDamaged) {
			// Badger held the directory lock to find the damage, so the
			// new memtables are its own; after any other failure (the lock
			// of a live process among them) they may be that process's.
			dropNewMemtables(dir, mems)
		}
		return nil, err
	}
	return db, nil
}

// memtables lists dir's memtable files.
func memtables(dir string) map[string]bool {
	m := map[string]bool{}
	names, _ := filepath.Glob(filepath.Join(dir, "*.mem"))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// dropNewMemtables removes the memtable files a failed Badger open created
// (it creates one before it reads the value log through) while they hold
// no entry (nothing but zeros past the log-file header), so a refused
// directory is left as it was found.
func dropNewMemtables(dir string, before map[string]bool) {
	for n := range memtables(dir) {
		if before[n] {
			continue
		}
		b, err := os.ReadFile(n)
		if err == nil && len(b) >= vlogHeaderSize && !slices.ContainsFunc(b[vlogHeaderSize:], func(c byte) bool { return c != 0 }) {
			os.Remove(n)
		}
	}
}
