package tokens

import "sync"

// hotRanks answers whether a short pre-token is one token from the
// answers of its worker's recent lookups. Most pre-tokens are up to eight
// bytes and are tokens, and tool output repeats them ("\n", " =", "self"),
// but every lookup in the rank table is a few cache misses in megabytes of
// slots, ids and bytes. A small direct-mapped table of the last answers
// stays in the core's cache. It is a cache of a pure function of the
// bytes, so an answer from it is the table's.
type hotRanks struct {
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
	token bool
}

// isToken is r.isToken, remembered for pieces of two to eight bytes.
func (h *hotRanks) isToken(r *ranks, b []byte) bool {
	if h == nil || len(b) > 8 || len(b) < 2 {
		return r.isToken(b)
	}
	e, v := h.entry(b)
	if e.n == uint8(len(b)) && e.v == v {
		return e.token
	}
	_, ok := r.rank(b)
	*e = hotEntry{v: v, n: uint8(len(b)), token: ok}
	return ok
}

// entry returns b's place in the table and b packed (2 to 8 bytes).
func (h *hotRanks) entry(b []byte) (*hotEntry, uint64) {
	v := pack(b)
	return &h.e[mixShort(v, len(b))>>(64-hotBits)], v
}

// hotPool lends the workers their tables and keeps them: the answers stay
// good for any later body of the same encoding (ranks are fixed). A new
// table starts as a copy of seed, which holds the encoding's first tokens
// of two to eight bytes (the lowest ranks, the merges its training text
// made first, are its commonest), so the first count after start is not
// slower than the next cold one.
type hotPool struct {
	mu   sync.Mutex
	free []*hotRanks
	seed *hotRanks
}

// maxFreeHot bounds the tables kept: one per worker of a few counts at
// once.
const maxFreeHot = 16

func (p *hotPool) get() *hotRanks {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		h := p.free[n-1]
		p.free = p.free[:n-1]
		return h
	}
	h := new(hotRanks)
	if p.seed != nil {
		*h = *p.seed
	}
	return h
}

func (p *hotPool) put(h *hotRanks) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < maxFreeHot {
		p.free = append(p.free, h)
	}
}

// seedHot fills the pool's seed with r's tokens, lowest ids first.
func (r *ranks) seedHot() {
	seed := new(hotRanks)
	for id := range len(r.off) - 1 {
		b := r.token(id)
		if len(b) < 2 || len(b) > 8 {
			continue
		}
		if e, v := seed.entry(b); e.n == 0 {
			*e = hotEntry{v: v, n: uint8(len(b)), token: true}
		}
	}
	r.hot.seed = seed
}
