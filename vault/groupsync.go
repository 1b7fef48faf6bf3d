package vault

import (
	"sync"
	"sync/atomic"
)

// syncGroup is group commit for db.Sync: every Persist that wrote must have
// its writes synced before its receipts go out, and a sync costs the same
// whether it covers one request's batch or sixteen. Concurrent callers
// therefore share runs: a caller joins the next run that has not started
// yet (one that started before the call may miss its writes), and while a
// run is under way every newcomer gathers into the following one, which
// starts as soon as the current one ends. Runs never overlap. The zero
// value is ready to use.
type syncGroup struct {
	mu      sync.Mutex
	running bool
	next    *syncRound    // gathering callers, not started
	runs    atomic.Uint64 // runs started, for Stats
}

type syncRound struct {
	done chan struct{} // closed when err is set
	err  error
}

// sync returns once a run of do that started after this call has ended,
// with that run's error.
func (g *syncGroup) sync(do func() error) error {
	g.mu.Lock()
	if g.next == nil {
		g.next = &syncRound{done: make(chan struct{})}
	}
	r := g.next
	if !g.running {
		g.running, g.next = true, nil
		g.mu.Unlock()
		g.run(r, do)
	} else {
		g.mu.Unlock()
	}
	<-r.done
	return r.err
}

// run runs round r, then hands the round gathered meanwhile (if any) to a
// goroutine of its own, so the caller that led r is not kept waiting for
// later rounds.
func (g *syncGroup) run(r *syncRound, do func() error) {
	g.runs.Add(1)
	r.err = do()
	close(r.done)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.next == nil {
		g.running = false
		return
	}
	next := g.next
	g.next = nil
	go g.run(next, do)
}
