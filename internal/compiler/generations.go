package compiler

import "sync"

// generations is a map bounded by keeping two generations of at most max
// entries each: when the current one fills it becomes the previous one
// (the one before is dropped), and an entry read from the previous one
// moves back into the current. A miss only costs the work the cache
// would have saved. Safe for concurrent use. The text cache's entries,
// the parse's memory of long strings and the remembered token counts are
// kept this way.
type generations[K comparable, V any] struct {
	mu        sync.Mutex
	max       int
	cur, prev map[K]V
}

func newGenerations[K comparable, V any](max int) *generations[K, V] {
	return &generations[K, V]{max: max, cur: map[K]V{}}
}

func (g *generations[K, V]) get(k K) (V, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if v, ok := g.cur[k]; ok {
		return v, true
	}
	v, ok := g.prev[k]
	if ok {
		g.putLocked(k, v)
	}
	return v, ok
}

func (g *generations[K, V]) put(k K, v V) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.putLocked(k, v)
}

// update stores fn of k's value (the zero value when absent), unless fn
// says there is nothing to store.
func (g *generations[K, V]) update(k K, fn func(old V) (V, bool)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v, ok := g.cur[k]
	if !ok {
		v = g.prev[k]
	}
	if nv, store := fn(v); store {
		g.putLocked(k, nv)
	}
}

// len is the current generation's size.
func (g *generations[K, V]) len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.cur)
}

func (g *generations[K, V]) putLocked(k K, v V) {
	if len(g.cur) >= g.max {
		g.prev, g.cur = g.cur, make(map[K]V, g.max/4)
	}
	g.cur[k] = v
}
