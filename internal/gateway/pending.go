package gateway

import (
	"context"
	"sync"
	"time"
)

// pendingCommits orders a tenant's lineage records before its next
// compiles. A request whose answer has a declared length records its
// lineage in the background while the answer goes to the client
// (commitBehind), so that the client does not wait for the vault write;
// the lineage is promised (add) the moment the answer is whole, before any
// of its last bytes go out, and a compile of the same tenant (HTTP or
// WebSocket) waits (wait) for every promise made before it starts. A
// client that sends its next request as soon as it has read the answer
// therefore compiles against the recorded lineage, as if the record had
// been written before the answer went out. A promise is kept when the
// write ends (written, failed or panicked) and broken at its bound.
//
// One registry serves the process (promises): a reload builds new
// gateways while the old ones still record the lineage of answers they
// sent, and the tenant's next request may reach a new one. The zero value
// is ready. A promise is per request, so a steady stream of
// a tenant's answers never starves a waiter: it waits only for those
// promised before it began.
type pendingCommits struct {
	mu sync.Mutex
	m  map[string][]*promise // tenant -> its open promises
	// blocked, when set (tests), is called when a wait finds promises
	// open and is about to block on them.
	blocked func(tenant string)
	// bound is how long a promise stays open at most (zero:
	// promiseBound); tests shorten it.
	bound time.Duration
}

// promise is one open lineage record: c is closed when it is kept or
// broken; t breaks it at the bound.
type promise struct {
	c chan struct{}
	t *time.Timer
}

// promiseBound is how long a promise of a lineage record stays open at
// most. The record's write has its own, shorter bound in the compiler;
// this one is the backstop for a write that ignores it, so that one stuck
// write holds its tenant's next compiles no longer than this (they then
// compile without the record: a later request finds an older ancestor and
// inlines more).
const promiseBound = 5 * time.Second

// add promises a lineage record of tenant; done keeps it (safe to call
// more than once, from any goroutine, and from a deferred call after a
// panic). A promise not kept within the bound is broken: its waiters go
// on.
func (p *pendingCommits) add(tenant string) (done func()) {
	pr := &promise{c: make(chan struct{})}
	done = sync.OnceFunc(func() {
		p.mu.Lock()
		open := p.m[tenant]
		for i, o := range open {
			if o == pr {
				open = append(open[:i:i], open[i+1:]...)
				break
			}
		}
		if len(open) == 0 {
			delete(p.m, tenant)
		} else {
			p.m[tenant] = open
		}
		pr.t.Stop()
		p.mu.Unlock()
		close(pr.c)
	})
	bound := p.bound
	if bound <= 0 {
		bound = promiseBound
	}
	p.mu.Lock()
	if p.m == nil {
		p.m = map[string][]*promise{}
	}
	p.m[tenant] = append(p.m[tenant], pr)
	pr.t = time.AfterFunc(bound, done) // done takes mu: it sees t set
	p.mu.Unlock()
	return done
}

// wait returns once every record of tenant promised before the call is
// written, or false when ctx ends first (the compile then runs into the
// same end and forwards the original).
func (p *pendingCommits) wait(ctx context.Context, tenant string) bool {
	p.mu.Lock()
	open := append([]*promise(nil), p.m[tenant]...)
	blocked := p.blocked
	p.mu.Unlock()
	if len(open) > 0 && blocked != nil {
		blocked(tenant)
	}
	return awaitPromises(ctx, open)
}

// awaitPromises returns once every promise in open is kept or broken, or
// false when ctx ends first.
func awaitPromises(ctx context.Context, open []*promise) bool {
	for _, pr := range open {
		select {
		case <-pr.c:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// processPending is the registry of every gateway of the process.
var processPending pendingCommits

// promises is the gateway's registry: the process's unless a test set one.
func (g *Gateway) promises() *pendingCommits {
	if g.pending != nil {
		return g.pending
	}
	return &processPending
}

// AwaitLineage waits until every lineage record promised in the process
// so far is written (or ctx ends): a vault is closed only after the
// records of the answers its gateways already sent, so a stop or a reload
// right after an answer does not lose its lineage.
func AwaitLineage(ctx context.Context) bool {
	p := &processPending
	p.mu.Lock()
	var open []*promise
	for _, prs := range p.m {
		open = append(open, prs...)
	}
	p.mu.Unlock()
	return awaitPromises(ctx, open)
}
