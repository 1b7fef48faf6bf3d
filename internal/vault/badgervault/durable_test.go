package badgervault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// TestSyncOlderLogs: every memtable log but the newest (by id, past five
// digits too) is synced; other files are left alone.
func TestSyncOlderLogs(t *testing.T) {
	tests := []struct {
		name  string
		files []string
		want  []string
	}{
		{"none", nil, nil},
		{"only the current", []string{"00007.mem", "000001.vlog", "MANIFEST"}, nil},
		{"one waiting for its flush", []string{"00007.mem", "00008.mem", "000001.vlog"}, []string{"00007.mem"}},
		{"two waiting", []string{"00009.mem", "00007.mem", "00008.mem"}, []string{"00007.mem", "00008.mem"}},
		{"past five digits", []string{"99999.mem", "100000.mem"}, []string{"99999.mem"}},
		{"not a log", []string{"00007.mem", "x.mem", "00008.mem.tmp"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, f), []byte("log"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var synced []string
			got, err := syncOlderLogs(dir, func(p string) error {
				synced = append(synced, filepath.Base(p))
				return syncFile(p)
			})
			if err != nil || !slices.Equal(got, tt.want) || !slices.Equal(synced, tt.want) {
				t.Fatalf("synced %q (returned %q), %v; want %q", synced, got, err, tt.want)
			}
		})
	}
	if _, err := syncOlderLogs(filepath.Join(t.TempDir(), "gone"), syncFile); err == nil {
		t.Fatal("a missing directory synced")
	}
}

// TestPersistSyncsWaitingMemtableLogs: Persist's sync covers a memtable log
// older than the current one (one waiting for its flush), and fails, so no
// receipt goes out, when that log cannot be synced. The waiting log is
// simulated by a file with an id below Badger's.
func TestPersistSyncsWaitingMemtableLogs(t *testing.T) {
	errSync := errors.New("injected fsync failure")
	for _, fail := range []bool{false, true} {
		var mu sync.Mutex
		var synced []string
		cfg := Config{syncFile: func(p string) error {
			if filepath.Ext(p) == valueLogExt {
				return syncFile(p) // the early value-log sync (TestSyncDBValueLogEarly)
			}
			mu.Lock()
			synced = append(synced, filepath.Base(p))
			mu.Unlock()
			if fail {
				return errSync
			}
			return syncFile(p)
		}}
		s := openTest(t, cfg)
		if err := os.WriteFile(filepath.Join(s.dir, "00000.mem"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		err := s.Persist(context.Background(), artifact.Scope{Tenant: "t"}, []artifact.Artifact{mkArt("waiting log")})
		if !slices.Equal(synced, []string{"00000.mem"}) {
			t.Fatalf("fail=%v: synced %q, want the waiting log", fail, synced)
		}
		if fail != errors.Is(err, errSync) {
			t.Fatalf("fail=%v: Persist = %v", fail, err)
		}
		if fail && !strings.Contains(err.Error(), "sync") {
			t.Fatalf("error does not say it was the sync: %v", err)
		}
	}
}

// TestSyncDBValueLogEarly: syncDB also syncs the newest value-log file
// itself (ahead of Badger's own sync of it), and a failure there fails the
// sync, so no receipt goes out on it.
func TestSyncDBValueLogEarly(t *testing.T) {
	errSync := errors.New("injected fsync failure")
	for _, fail := range []bool{false, true} {
		var mu sync.Mutex
		var vlogs []string
		s := openTest(t, Config{syncFile: func(p string) error {
			if filepath.Ext(p) == valueLogExt {
				mu.Lock()
				vlogs = append(vlogs, filepath.Base(p))
				mu.Unlock()
				if fail {
					return errSync
				}
			}
			return syncFile(p)
		}})
		names, err := logFiles(s.dir, valueLogExt)
		if err != nil || len(names) == 0 {
			t.Fatalf("value logs %q, %v", names, err)
		}
		err = s.Persist(context.Background(), artifact.Scope{Tenant: "t"}, []artifact.Artifact{mkArt("early")})
		if !slices.Equal(vlogs, names[len(names)-1:]) {
			t.Fatalf("fail=%v: synced %q, want the newest of %q", fail, vlogs, names)
		}
		if fail != errors.Is(err, errSync) {
			t.Fatalf("fail=%v: Persist = %v", fail, err)
		}
	}
}

// A record a Persist has committed but not yet synced is found by a
// concurrent request's verify; that request must not confirm it before a
// sync covers it. And a write whose sync fails drops what it wrote, so no
// later request confirms content that may not be durable.
func TestVerifyWaitsForTheWritersSync(t *testing.T) {
	errSync := errors.New("injected fsync failure")
	var block atomic.Bool
	var fail atomic.Bool
	entered := make(chan struct{}, 8)
	release := make(chan struct{})
	s := openTest(t, Config{syncFile: func(p string) error {
		if filepath.Ext(p) == valueLogExt && block.Load() {
			entered <- struct{}{}
			<-release
			if fail.Load() {
				return errSync
			}
		}
		return syncFile(p)
	}})
	ctx := context.Background()
	sc := artifact.Scope{Tenant: "t"}

	for _, failing := range []bool{false, true} {
		a := mkArt(fmt.Sprintf("written while another request asks for it, fail=%v", failing))
		written := s.Stats().Written
		block.Store(true)
		fail.Store(failing)
		first := make(chan error, 1)
		go func() { first <- s.Persist(ctx, sc, []artifact.Artifact{a}) }()
		<-entered // committed, its sync under way

		second := make(chan error, 1)
		go func() { second <- s.Persist(ctx, sc, []artifact.Artifact{a}) }()
		select {
		case err := <-second:
			block.Store(false)
			close(release) // let the first one finish before the store closes
			<-first
			t.Fatalf("fail=%v: a concurrent Persist confirmed an unsynced record (err %v)", failing, err)
		case <-time.After(100 * time.Millisecond):
		}
		block.Store(false) // the second request's own sync goes through
		close(release)
		errFirst, errSecond := <-first, <-second
		release = make(chan struct{})
		if failing != errors.Is(errFirst, errSync) {
			t.Fatalf("fail=%v: first Persist = %v", failing, errFirst)
		}
		if !failing {
			if errSecond != nil {
				t.Fatalf("second Persist = %v", errSecond)
			}
			continue
		}
		// The failed write dropped its record; the waiting request saw the
		// drop, stored the artifact again itself and synced it.
		if errSecond != nil {
			t.Fatalf("second Persist after the first one's failed sync = %v", errSecond)
		}
		m, err := s.Missing(ctx, sc, []artifact.Digest{a.Digest})
		if err != nil || len(m) != 0 {
			t.Fatalf("the second Persist returned nil, yet Missing = %d, %v", len(m), err)
		}
		if st := s.Stats(); st.Written != written+2 {
			t.Fatalf("written %d -> %d, want both Persists to have written it", written, st.Written)
		}
	}
}
