package compiler

import (
	"sync"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// usageNotes remembers, for the most recent forwarded requests, what the
// provider reported in its response's usage. It is the calibration hook of
// the cost decision: a response that read nothing from the cache although
// the decision expected a cache read means the provider's cache is cold
// whatever the clock says (evicted, routed elsewhere), so the next request
// may rewrite its prefix freely. In memory and bounded: losing it only
// means trusting the TTL.
type usageNotes struct {
	mu    sync.Mutex
	notes map[string]usageNote
	order []string // insertion order, for eviction
}

type usageNote struct {
	usage      provider.Usage
	expectRead float64 // tokens the decision expected to be read from the cache
}

const maxUsageNotes = 4096

func newUsageNotes() *usageNotes { return &usageNotes{notes: map[string]usageNote{}} }

func usageKey(s artifact.Scope, chainEnd artifact.Digest) string {
	return s.Tenant + "\x00" + s.Session + "\x00" + string(chainEnd[:])
}

// ObserveUsage records what the provider reported for the response to a
// forwarded request (res is that request's Result). The response path calls
// it once the usage is known; a Result without a conversation, or a usage
// that was not seen, is ignored.
func (c *Compiler) ObserveUsage(res Result, u provider.Usage) {
	if res.usageKey == "" || !u.Known {
		return
	}
	n := c.usage
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.notes[res.usageKey]; !ok {
		if len(n.order) == maxUsageNotes {
			delete(n.notes, n.order[0])
			n.order = n.order[1:]
		}
		n.order = append(n.order, res.usageKey)
	}
	n.notes[res.usageKey] = usageNote{usage: u, expectRead: res.expectRead}
}

// cold reports whether the response to the request recorded as chainEnd
// read nothing from the provider's cache although a cache read of at least
// the minimum prefix was expected.
func (n *usageNotes) cold(s artifact.Scope, chainEnd artifact.Digest, m cost.Model) bool {
	n.mu.Lock()
	note, ok := n.notes[usageKey(s, chainEnd)]
	n.mu.Unlock()
	return ok && note.usage.CacheRead == 0 && note.expectRead >= float64(max(m.MinPrefix, 1))
}
