package tokens

import (
	"sync"
)

// memo remembers the counts of pre-tokens that are not tokens themselves,
// so a word seen before is not byte-pair merged again: a merge costs a rank
// lookup per candidate pair, a memo hit one map lookup. Tool output repeats
// its identifiers, so most merges of a cold body are hits. Pre-tokens that
// are tokens (most of them) never reach the memo: the rank table answers.
//
// Two generations bound it: entries go to cur; when cur is full it becomes
// old and a new cur starts; a hit in old is copied to cur.
type memo struct {
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
	return &memo{cur: map[string]int32{}, max: max(int(bytes/2), 1)}
}

func (m *memo) get(b []byte) (int, bool) {
	if n, ok := m.cur[string(b)]; ok {
		return int(n), true
	}
	n, ok := m.old[string(b)]
	if ok {
		m.put(string(b), n)
	}
	return int(n), ok
}

func (m *memo) put(s string, n int32) {
	if m.size >= m.max {
		m.old, m.cur, m.size = m.cur, map[string]int32{}, 0
	}
	m.cur[s] = n
	m.size += len(s) + memoEntryBytes
}

// count returns the token count of piece; false if it holds a pre-token too
// long to merge in reasonable time (see maxPreToken). hot, which may be
// nil, is the calling worker's table of recent answers.
func (m *memo) count(enc *encoding, r *ranks, hot *hotRanks, piece []byte) (n int, ok bool) {
	var buf [64]part
	text := validUTF8(piece)
	sc := scanner{s: text}
	for i := 0; i < len(text); {
		e := sc.next(i, enc.o200k)
		p := text[i:e]
		i = e
		if len(p) > maxPreToken {
			return 0, false
		}
		if hot.isToken(r, p) {
			n++
			continue
		}
		m.mu.Lock()
		k, hit := m.get(p)
		m.mu.Unlock()
		if !hit {
			k = len(r.merge(p, buf[:0])) - 1
			if len(p) <= maxMemoLen {
				m.mu.Lock()
				m.put(string(p), int32(k))
				m.mu.Unlock()
			}
		}
		n += k
	}
	return n, true
}
