package tokens

import "sync"

// hotCounts answers the count of a short pre-token from its worker's
// recent answers. Most pre-tokens are up to eight bytes and tool output
// repeats them ("\n", " =", "self", " getD"), but every answer from the
// rank table is a few cache misses in megabytes of slots, ids and bytes,
// and one that is not a token is a lookup in the shared memo as well. A
// small direct-mapped table of the last answers stays in the core's cache,
// and is the worker's own: no lock. It is a cache of a pure function of
// the bytes, so an answer from it is the merge's.
type hotCounts struct {
	e [hotEntries]hotEntry
}

// hotEntries is a power of two; 16-byte entries make 64 KB.
const (
	hotBits    = 12
	hotEntries = 1 << hotBits
)

type hotEntry struct {
	v     uint64 // the bytes, packed
	n     uint8  // their length; 0: empty (never two lengths of one v in an entry: see mixShort)
	count uint8  // their token count (1: a token)
}

// lookup returns the entry of the n bytes (two to eight) packed as v
// (pack), and whether it holds their count. It and remember are small
// enough to inline into the counting loop (memo.countValid), which is the
// table's one reader.
func (h *hotCounts) lookup(v uint64, n int) (*hotEntry, bool) {
	e := &h.e[mixShort(v, n)>>(64-hotBits)]
	return e, e.n == uint8(n) && e.v == v
}

// remember makes e hold count for the n bytes packed as v.
func (e *hotEntry) remember(v uint64, n, count int) {
	*e = hotEntry{v: v, n: uint8(n), count: uint8(count)}
}

// hotPool lends the workers their tables and keeps them: the answers stay
// good for any later body of the same encoding (ranks are fixed). A new
// table starts as a copy of seed, which holds the encoding's first tokens
// of two to eight bytes (the lowest ranks, the merges its training text
// made first, are its commonest), so the first count after start is not
// slower than the next cold one.
type hotPool struct {
	mu   sync.Mutex
	free []*hotCounts
	seed *hotCounts
}

// maxFreeHot bounds the tables kept: one per worker of a few counts at
// once.
const maxFreeHot = 16

func (p *hotPool) get() *hotCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		h := p.free[n-1]
		p.free = p.free[:n-1]
		return h
	}
	h := new(hotCounts)
	if p.seed != nil {
		*h = *p.seed
	}
	return h
}

func (p *hotPool) put(h *hotCounts) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < maxFreeHot {
		p.free = append(p.free, h)
	}
}

// seedHot fills the pool's seed with r's tokens, lowest ids first.
func (r *ranks) seedHot() {
	seed := new(hotCounts)
	for id := range len(r.off) - 1 {
		b := r.token(id)
		if len(b) < 2 || len(b) > 8 {
			continue
		}
		if e, _ := seed.lookup(pack(b), len(b)); e.n == 0 {
			e.remember(pack(b), len(b), 1)
		}
	}
	r.hot.seed = seed
}
