package vault

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
