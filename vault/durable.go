package vault

import (
	"cmp"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// memtableLogExt is the extension of Badger's memtable logs (WAL files),
// named <5-digit id>.mem with ids growing.
const memtableLogExt = ".mem"

// syncDB makes every write committed so far durable, for Persist's group
// commit. db.Sync covers the current memtable's log and the current
// value-log file, one fsync each. That is not all a write may need: a
// memtable that filled up between the write and the sync has been swapped
// for a new one and waits for its flush to a table, and until that flush
// completes its log is the only copy of the keys, and nothing has synced
// it. (A value-log file is synced by Badger when it is closed for a new
// one, so the value log has no such gap.) So after db.Sync every memtable
// log but the newest is synced too: normally there is none and this costs
// one directory read; the newest is the current memtable (or one newer,
// which holds only writes later than db.Sync's).
func (s *Store) syncDB() error {
	if err := s.db.Sync(); err != nil {
		return err
	}
	_, err := syncOlderLogs(s.dir, s.syncFile)
	return err
}

// syncOlderLogs syncs (with sync) every memtable log in dir but the newest
// and returns their names. A log deleted meanwhile was flushed to a table:
// nothing to do.
func syncOlderLogs(dir string, sync func(path string) error) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type memLog struct {
		id   uint64
		name string
	}
	var logs []memLog
	for _, e := range ents {
		name := e.Name()
		id, err := strconv.ParseUint(strings.TrimSuffix(name, memtableLogExt), 10, 64)
		if err == nil && strings.HasSuffix(name, memtableLogExt) {
			logs = append(logs, memLog{id, name})
		}
	}
	if len(logs) < 2 {
		return nil, nil
	}
	// By id: names are zero-padded to five digits only.
	slices.SortFunc(logs, func(a, b memLog) int { return cmp.Compare(a.id, b.id) })
	var older []string
	for _, l := range logs[:len(logs)-1] {
		older = append(older, l.name)
	}
	for _, name := range older {
		if err := sync(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return older, nil
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
