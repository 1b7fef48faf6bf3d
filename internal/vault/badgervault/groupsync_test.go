package badgervault

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// TestSyncGroupShares: concurrent callers share runs, runs never overlap,
// and no caller returns before a run that started after its call ended.
func TestSyncGroupShares(t *testing.T) {
	var g syncGroup
	var started, ended, runs atomic.Int64 // ended: the start number of the last run that ended
	var inRun atomic.Bool
	do := func() error {
		if !inRun.CompareAndSwap(false, true) {
			t.Error("two syncs at once")
		}
		n := started.Add(1)
		runs.Add(1)
		time.Sleep(2 * time.Millisecond)
		inRun.Store(false)
		ended.Store(n)
		return nil
	}
	const callers = 64
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			before := started.Load()
			if err := g.sync(do); err != nil {
				t.Error(err)
			}
			if got := ended.Load(); got <= before {
				t.Errorf("returned after run %d; runs started before the call: %d", got, before)
			}
		}()
	}
	wg.Wait()
	if n := runs.Load(); n >= callers/2 {
		t.Fatalf("%d syncs for %d concurrent callers", n, callers)
	}
	// Idle again: a lone caller runs its own sync at once.
	before := runs.Load()
	if err := g.sync(do); err != nil || runs.Load() != before+1 {
		t.Fatalf("lone caller: err %v, runs %d -> %d", err, before, runs.Load())
	}
}

// TestSyncGroupError: every caller of a failing run gets its error; the
// next run starts clean.
func TestSyncGroupError(t *testing.T) {
	var g syncGroup
	boom := errors.New("sync failed")
	fail := atomic.Bool{}
	fail.Store(true)
	gate := make(chan struct{})
	do := func() error {
		<-gate
		if fail.Load() {
			return boom
		}
		return nil
	}
	errs := make(chan error, 8)
	for range 8 {
		go func() { errs <- g.sync(do) }()
	}
	time.Sleep(10 * time.Millisecond) // let them gather
	fail.Store(true)
	close(gate)
	for range 8 {
		if err := <-errs; !errors.Is(err, boom) {
			t.Fatalf("caller got %v, want the run's error", err)
		}
	}
	fail.Store(false)
	if err := g.sync(do); err != nil {
		t.Fatalf("after a failed run: %v", err)
	}
}

// TestPersistSyncs: a Persist that writes syncs once, whatever it writes;
// one that finds everything stored does not sync.
func TestPersistSyncs(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	sc := artifact.Scope{Tenant: "t"}
	a, b := mkArt("one"), mkArt("two")
	tests := []struct {
		name string
		arts []artifact.Artifact
		want uint64
	}{
		{"one new", []artifact.Artifact{a}, 1},
		{"stored again", []artifact.Artifact{a}, 0},
		{"one stored, one new", []artifact.Artifact{a, b}, 1},
		{"fifty new", benchArtsOf("syncs"), 1},
	}
	for _, tt := range tests {
		before := s.Stats().Syncs
		if err := s.Persist(ctx, sc, tt.arts); err != nil {
			t.Fatal(err)
		}
		if got := s.Stats().Syncs - before; got != tt.want {
			t.Errorf("%s: %d syncs, want %d", tt.name, got, tt.want)
		}
	}
}
