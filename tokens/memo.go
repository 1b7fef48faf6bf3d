package tokens

import (
	"sync"
)

// memo counts a new piece faster than tiktoken alone: it cuts the piece at
// every allowed position (split with minSize 1, bits 0; exact for the same
// reason as the pieces themselves) into word-sized parts, and remembers
// their counts. Tool output repeats its words, identifiers and indentation, so on
// the corpus about half the bytes of a body never reach tiktoken, even cold.
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

// count returns the token count of piece, tokenizing only unknown parts;
// false if a part may hold a pre-token too long to encode in reasonable time.
var wordPool = sync.Pool{New: func() any { w := make([][]byte, 0, 1024); return &w }}

func (m *memo) count(enc *encoding, r *ranks, piece []byte) (int, bool) {
	// The word list is pooled: a cold megabyte has ~100k words, and a
	// fresh list per piece was a third of all the gateway's allocation.
	wp := wordPool.Get().(*[][]byte)
	words := (*wp)[:0]
	defer func() {
		clear(words) // drop references into the caller's body
		*wp = words[:0]
		wordPool.Put(wp)
	}()
	var miss [][]byte
	split(piece, 1, 0, func(w []byte) { words = append(words, w) })
	total := 0
	m.mu.Lock()
	for _, b := range words {
		if n, ok := m.get(b); ok {
			total += n
		} else {
			miss = append(miss, b)
		}
	}
	m.mu.Unlock()
	if len(miss) == 0 {
		return total, true
	}
	counts := make([]int32, len(miss))
	for i, b := range miss {
		n, ok := enc.count(r, b)
		if !ok {
			return 0, false
		}
		counts[i] = int32(n)
		total += n
	}
	m.mu.Lock()
	for i, b := range miss {
		if len(b) <= maxMemoLen {
			m.put(string(b), counts[i])
		}
	}
	m.mu.Unlock()
	return total, true
}
