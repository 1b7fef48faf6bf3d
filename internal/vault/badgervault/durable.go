package badgervault

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
// named <id>.mem with ids growing.
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
	// db.Sync syncs the memtable's log, then the value log: two device
	// flushes one after the other. Syncing the value-log file from here at
	// the same time makes its writeback overlap the first; Badger's own
	// sync of it then finds little left to write, which shortens the
	// sync. Durability still rests on db.Sync, which runs whole; a failure
	// of the early sync fails the sync too.
	early := make(chan error, 1)
	go func() { early <- syncNewest(s.dir, valueLogExt, s.syncFile) }()
	err := s.db.Sync()
	if eerr := <-early; err == nil {
		err = eerr
	}
	if err != nil {
		return err
	}
	_, err = syncOlderLogs(s.dir, s.syncFile)
	return err
}

// valueLogExt is the extension of Badger's value-log files, <id>.vlog.
const valueLogExt = ".vlog"

// syncNewest syncs the file with the highest id and extension ext in dir.
func syncNewest(dir, ext string, sync func(path string) error) error {
	logs, err := logFiles(dir, ext)
	if err != nil || len(logs) == 0 {
		return err
	}
	err = sync(filepath.Join(dir, logs[len(logs)-1]))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// syncOlderLogs syncs (with sync) every memtable log in dir but the newest
// and returns their names. A log deleted meanwhile was flushed to a table:
// nothing to do.
func syncOlderLogs(dir string, sync func(path string) error) ([]string, error) {
	logs, err := logFiles(dir, memtableLogExt)
	if err != nil || len(logs) < 2 {
		return nil, err
	}
	older := logs[:len(logs)-1]
	for _, name := range older {
		if err := sync(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return older, nil
}

// logFiles returns the names <decimal id><ext> in dir, by id (Badger pads
// ids to a fixed width only up to some size).
func logFiles(dir, ext string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type log struct {
		id   uint64
		name string
	}
	var logs []log
	for _, e := range ents {
		name := e.Name()
		id, err := strconv.ParseUint(strings.TrimSuffix(name, ext), 10, 64)
		if err == nil && strings.HasSuffix(name, ext) {
			logs = append(logs, log{id, name})
		}
	}
	slices.SortFunc(logs, func(a, b log) int { return cmp.Compare(a.id, b.id) })
	names := make([]string, len(logs))
	for i, l := range logs {
		names[i] = l.name
	}
	return names, nil
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
