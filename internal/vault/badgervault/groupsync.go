package badgervault

import (
	"sync"
	"sync/atomic"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
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

// pendingSet counts, per artifact, the writes that committed its record
// but have not yet seen it synced and read back. A concurrent verify can
// find such a record in Badger before it is durable; it must not confirm
// it until a sync has covered it. The zero value is ready to use.
type pendingSet struct {
	mu sync.Mutex
	m  map[verifiedKey]int
}

func (p *pendingSet) add(tenant string, arts []*artifact.Artifact) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[verifiedKey]int{}
	}
	for _, a := range arts {
		p.m[verifiedKey{tenant, a.Digest}]++
	}
}

func (p *pendingSet) done(tenant string, arts []*artifact.Artifact) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range arts {
		k := verifiedKey{tenant, a.Digest}
		if p.m[k]--; p.m[k] <= 0 {
			delete(p.m, k)
		}
	}
}

// any reports whether one of the artifacts listed is pending.
func (p *pendingSet) any(tenant string, lists ...[]seenDigest) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.m) == 0 {
		return false
	}
	for _, ds := range lists {
		for _, d := range ds {
			if p.m[verifiedKey{tenant, d.d}] > 0 {
				return true
			}
		}
	}
	return false
}
