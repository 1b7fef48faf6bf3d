package tokens

import (
	"encoding/binary"
	"sync"
	"unicode/utf8"
)

// memo remembers the counts of pre-tokens that are not tokens themselves,
// so a word seen before is not byte-pair merged again: a merge costs a
// rank lookup per candidate pair, a memo hit one map lookup. Tool output
// repeats its identifiers, so most merges of a cold body are hits.
// Pre-tokens that are tokens never reach the memo (the rank table
// answers), and short ones it answered are then in the worker's hot table
// (hot.go). It is sharded: every counting worker of every request shares
// it, and one lock would make them wait on each other.
type memo struct {
	shard [memoShards]memoGens
}

const memoShards = 16

// memoGens is a shard. Two generations bound it: entries go to cur; when
// cur is full it becomes old and a new cur starts; a hit in old is copied
// to cur.
type memoGens struct {
	mu       sync.Mutex
	cur, old map[string]int32
	size     int // accounted bytes in cur
	max      int // per generation
}

// memoEntryBytes is the accounted overhead of a memo entry besides its text:
// string header, value and map slot with growth slack, string allocation
// rounding. TestMemoMemoryBound measures it.
const memoEntryBytes = 64

// maxMemoLen keeps long parts out: they rarely repeat exactly, and the piece
// cache holds the piece they came from.
const maxMemoLen = 128

func newMemo(bytes int64) *memo {
	m := &memo{}
	for i := range m.shard {
		m.shard[i].init(bytes / memoShards)
	}
	return m
}

func (g *memoGens) init(bytes int64) {
	g.cur, g.max = map[string]int32{}, max(int(bytes/2), 1)
}

// genMax is the bound of one generation of the whole memo.
func (m *memo) genMax() int { return m.shard[0].max * memoShards }

// of returns b's shard (b: two bytes or more).
func (m *memo) of(b []byte) *memoGens {
	v := pack(b[:min(len(b), 8)])
	if len(b) > 8 {
		v ^= pack(b[len(b)-8:])
	}
	return &m.shard[mixShort(v, len(b)&7)>>(64-4)]
}

func (g *memoGens) get(b []byte) (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if n, ok := g.cur[string(b)]; ok {
		return int(n), true
	}
	n, ok := g.old[string(b)]
	if ok {
		g.add(string(b), n)
	}
	return int(n), ok
}

func (g *memoGens) put(s string, n int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.add(s, n)
}

func (g *memoGens) add(s string, n int32) {
	if g.size >= g.max {
		g.old, g.cur, g.size = g.cur, map[string]int32{}, 0
	}
	g.cur[s] = n
	g.size += len(s) + memoEntryBytes
}

// count returns the token count of piece; false if it holds a pre-token too
// long to merge in reasonable time (see maxPreToken). hot, which may be
// nil, is the calling worker's table of recent short answers.
func (m *memo) count(enc *encoding, r *ranks, hot *hotCounts, piece []byte) (n int, ok bool) {
	n, ok, valid := m.countValid(enc, r, hot, piece)
	if !valid { // counted again as tiktoken-go reads it; all it remembered holds
		n, ok, _ = m.countValid(enc, r, hot, validUTF8(piece))
	}
	return n, ok
}

// countValid is count of text that is valid UTF-8, which the scanner checks
// as it goes instead of a pass of its own; false valid: text is not, and n
// is no count. It stops at the first invalid byte, before merging any
// pre-token it misread (a run of bad bytes reads as one long punctuation
// pre-token); the counts it remembered before are of pre-tokens' bytes,
// right whatever cut them.
func (m *memo) countValid(enc *encoding, r *ranks, hot *hotCounts, text []byte) (n int, ok, valid bool) {
	sc := scanner{s: text}
	o200k := enc.o200k
	for i := 0; i < len(text); {
		e := -1
		switch { // sc.next, inlined
		case text[i] >= utf8.RuneSelf:
		case o200k:
			e = sc.asciiO200k(i)
		default:
			e = sc.asciiCl100k(i)
		}
		if e < 0 {
			if e = sc.general(i, o200k); sc.invalid {
				return 0, false, false // before any merge of what it misreads
			}
		}
		p := text[i:e]
		switch {
		case len(p) == 1: // every byte is a token
			n++
		case len(p) <= 8 && hot != nil:
			// pack(p) with one load where eight bytes are there to read
			v := uint64(0)
			if i+8 <= len(text) {
				v = binary.LittleEndian.Uint64(text[i:]) & (^uint64(0) >> (64 - 8*len(p)))
			} else {
				v = pack(p)
			}
			if e, hit := hot.lookup(v, len(p)); hit {
				n += int(e.count)
			} else {
				k := m.countOf(r, p)
				e.remember(v, len(p), k)
				n += k
			}
		case len(p) > maxPreToken:
			return 0, false, true
		default:
			n += m.countOf(r, p)
		}
		i = e
	}
	return n, true, true
}

// countOf counts a pre-token of more than one byte: a token, or its count
// from the memo, or a merge the memo then remembers.
func (m *memo) countOf(r *ranks, p []byte) int {
	if r.isToken(p) {
		return 1
	}
	if len(p) > maxMemoLen {
		return r.mergeCount(p)
	}
	g := m.of(p)
	if k, hit := g.get(p); hit {
		return k
	}
	k := r.mergeCount(p)
	g.put(string(p), int32(k))
	return k
}
