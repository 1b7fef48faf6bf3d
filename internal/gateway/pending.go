package gateway

import (
	"context"
	"sync"
)

// pendingCommits orders a tenant's lineage records before its next
// compiles. A request whose answer has a declared length records its
// lineage after the answer is flushed to the client, so that the client
// does not wait for the vault write; the lineage is promised (add) the
// moment the answer is whole, before any of its last bytes go out, and a
// compile of the same tenant waits (wait) for every promise made before
// it starts. A client that sends its next request as soon as it has read
// the answer therefore always compiles against the recorded lineage, as
// if the record had been written before the answer went out.
//
// One registry serves the process (promises): a reload builds new
// gateways while the old ones still record the lineage of answers they
// sent, and the tenant's next request may reach a new one. The zero value
// is ready. A promise is per request, so a steady stream of
// a tenant's answers never starves a waiter: it waits only for those
// promised before it began.
type pendingCommits struct {
	mu sync.Mutex
	m  map[string][]chan struct{} // tenant -> its open promises
	// blocked, when set (tests), is called when a wait finds promises
	// open and is about to block on them.
	blocked func(tenant string)
}

// add promises a lineage record of tenant; done keeps it (safe to call
// more than once, and from a deferred call after a panic).
func (p *pendingCommits) add(tenant string) (done func()) {
	c := make(chan struct{})
	p.mu.Lock()
	if p.m == nil {
		p.m = map[string][]chan struct{}{}
	}
	p.m[tenant] = append(p.m[tenant], c)
	p.mu.Unlock()
	return sync.OnceFunc(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		open := p.m[tenant]
		for i, o := range open {
			if o == c {
				open = append(open[:i:i], open[i+1:]...)
				break
			}
		}
		if len(open) == 0 {
			delete(p.m, tenant)
		} else {
			p.m[tenant] = open
		}
		close(c)
	})
}

// wait returns once every record of tenant promised before the call is
// written, or false when ctx ends first (the compile then runs into the
// same end and forwards the original).
func (p *pendingCommits) wait(ctx context.Context, tenant string) bool {
	p.mu.Lock()
	open := append([]chan struct{}(nil), p.m[tenant]...)
	blocked := p.blocked
	p.mu.Unlock()
	if len(open) > 0 && blocked != nil {
		blocked(tenant)
	}
	for _, c := range open {
		select {
		case <-c:
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
	var open []chan struct{}
	for _, cs := range p.m {
		open = append(open, cs...)
	}
	p.mu.Unlock()
	for _, c := range open {
		select {
		case <-c:
		case <-ctx.Done():
			return false
		}
	}
	return true
}
