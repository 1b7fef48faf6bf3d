package tokens

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strconv"

	"github.com/pkoukk/tiktoken-go-loader/assets"
)

// ranks is one encoding's mergeable ranks (token bytes -> token id), read
// once from tiktoken-go-loader's embedded .tiktoken file. It replaces
// tiktoken-go's maps (a map[string]int, its inverse and a sorted copy of
// every token: ~37 MB of RSS for both encodings) with flat slices the
// garbage collector never scans: about 5.5 MB for o200k_base, 2.9 MB for
// cl100k_base (TestRanksMemory measures it).
type ranks struct {
	data   []byte   // every token's bytes, by id
	off    []uint32 // token id's bytes are data[off[id]:off[id+1]]
	packed []uint64 // a token of up to 8 bytes as pack gives it, by id
	slots  []uint32 // open addressing: id+1 in the low idBits, a hash tag above; 0 is empty
	mask   uint64
	seed   maphash.Seed
	hot    hotPool // the workers' tables of recent answers (hot.go)
}

// idBits holds a token id + 1 in a slot; the remaining bits are a tag of
// the hash, so most probes of a wrong slot skip the byte comparison.
const (
	idBits = 18
	idMask = 1<<idBits - 1
)

// loadRanks parses the embedded file of the named encoding: one token a
// line, "base64 id", ids dense from 0 in file order.
func loadRanks(name string) (*ranks, error) {
	file, err := assets.Assets.ReadFile(name + ".tiktoken")
	if err != nil {
		return nil, err
	}
	n := bytes.Count(file, []byte("\n")) + 1
	if n >= idMask {
		return nil, fmt.Errorf("tokens: %s has %d tokens, more than a slot holds", name, n)
	}
	r := &ranks{
		data: make([]byte, 0, len(file)/2),
		off:  make([]uint32, 1, n+1),
		seed: maphash.MakeSeed(),
	}
	var scratch []byte
	for line := range bytes.Lines(file) {
		line = bytes.TrimRight(line, "\n")
		if len(line) == 0 {
			continue
		}
		b64, idText, ok := bytes.Cut(line, []byte(" "))
		id, err := strconv.Atoi(string(idText))
		if !ok || err != nil || id != len(r.off)-1 {
			return nil, fmt.Errorf("tokens: %s line %d: want id %d", name, len(r.off), len(r.off)-1)
		}
		scratch = slices.Grow(scratch[:0], base64.StdEncoding.DecodedLen(len(b64)))
		m, err := base64.StdEncoding.Decode(scratch[:cap(scratch)], b64)
		if err != nil {
			return nil, fmt.Errorf("tokens: %s line %d: %v", name, len(r.off), err)
		}
		r.data = append(r.data, scratch[:m]...)
		r.off = append(r.off, uint32(len(r.data)))
	}
	r.data = bytes.Clone(r.data) // exact size: the slab lives as long as the process
	tokens := len(r.off) - 1
	r.packed = make([]uint64, tokens)
	for id := range tokens {
		if b := r.token(id); len(b) <= 8 {
			r.packed[id] = pack(b)
		}
	}
	size := 1
	for size < 2*tokens {
		size <<= 1
	}
	r.slots = make([]uint32, size)
	r.mask = uint64(size - 1)
	for id := range tokens {
		b := r.token(id)
		h, v := r.hash(b)
		tag := uint32(h>>(64-(32-idBits))) << idBits
		i := h & r.mask
		for r.slots[i] != 0 {
			if _, dup := r.at(i, b, v, tag); dup {
				return nil, fmt.Errorf("tokens: %s: token %d repeats an earlier one", name, id)
			}
			i = (i + 1) & r.mask
		}
		r.slots[i] = tag | uint32(id+1)
	}
	r.seedHot()
	return r, nil
}

func (r *ranks) token(id int) []byte { return r.data[r.off[id]:r.off[id+1]] }

// pack returns the bytes of b (at most 8) as a number, b[0] lowest.
func pack(b []byte) uint64 {
	le := binary.LittleEndian
	switch n := len(b); {
	case n == 8:
		return le.Uint64(b)
	case n >= 4: // two overlapping 4-byte loads
		lo, hi := uint64(le.Uint32(b)), uint64(le.Uint32(b[n-4:]))
		return lo | hi<<(8*(n-4))
	case n >= 2:
		lo, hi := uint64(le.Uint16(b)), uint64(le.Uint16(b[n-2:]))
		return lo | hi<<(8*(n-2))
	case n == 1:
		return uint64(b[0])
	}
	return 0
}

// mixShort mixes a pre-token of n <= 8 bytes, packed as v, and its length
// (bytes that pack alike, "ab" and "ab\x00", differ in the top bits).
func mixShort(v uint64, n int) uint64 { return (v ^ uint64(n)<<59) * 0x9e3779b97f4a7c15 }

// hash returns the table hash of b and, for at most 8 bytes, b packed.
// Most pre-tokens are that short: a multiply mixes them without a call.
func (r *ranks) hash(b []byte) (h, v uint64) {
	if len(b) > 8 {
		return maphash.Bytes(r.seed, b), 0
	}
	v = pack(b)
	h = mixShort(v, len(b))
	return h ^ h>>32, v
}

// at reports the id in slot i if that slot holds b (v: b packed if short).
func (r *ranks) at(i uint64, b []byte, v uint64, tag uint32) (uint32, bool) {
	s := r.slots[i]
	if s&^idMask != tag {
		return 0, false
	}
	id := s&idMask - 1
	if len(b) <= 8 {
		return id, r.packed[id] == v && int(r.off[id+1]-r.off[id]) == len(b)
	}
	return id, bytes.Equal(r.token(int(id)), b)
}

// rank returns the id of the token b, false if b is not a token.
func (r *ranks) rank(b []byte) (uint32, bool) {
	h, v := r.hash(b)
	tag := uint32(h>>(64-(32-idBits))) << idBits
	for i := h & r.mask; r.slots[i] != 0; i = (i + 1) & r.mask {
		if id, ok := r.at(i, b, v, tag); ok {
			return id, true
		}
	}
	return 0, false
}

// part is a position of a byte-pair merge: where a part starts, and the
// rank of the token joining it with the next part (noRank if none).
type part struct {
	start int
	rank  uint32
}

const noRank = math.MaxUint32

// maxQuadraticMerge is the longest pre-token merged by the quadratic scan
// (merge): below it the scan is faster than the heap; above it mergeLong
// keeps the cost per byte bounded (n log n), so a long run of spaces or
// punctuation costs about as much as any text of its length.
const maxQuadraticMerge = 256

// merge runs tiktoken's byte-pair merge on piece (not itself a token):
// repeatedly join the adjacent pair whose joint bytes have the lowest rank,
// the leftmost one on a tie, until no pair is a token. It returns the
// starts of the final tokens followed by len(piece), in buf's storage.
// Like tiktoken-go's it is quadratic in len(piece), fast on short pieces;
// longer ones go to mergeLong, which gives the same parts.
func (r *ranks) merge(piece []byte, buf []part) []part {
	if len(piece) > maxQuadraticMerge {
		return r.mergeLong(piece, buf)
	}
	return r.mergeQuadratic(piece, buf)
}

func (r *ranks) mergeQuadratic(piece []byte, buf []part) []part {
	parts := buf[:0]
	for i := range len(piece) + 1 {
		parts = append(parts, part{start: i, rank: noRank})
	}
	// pairRank is the rank of parts[i] joined with parts[i+1] (and with
	// parts[i+2] when skip is 1, i.e. after the merge at i+1).
	pairRank := func(i, skip int) uint32 {
		if i+skip+2 < len(parts) {
			if id, ok := r.rank(piece[parts[i].start:parts[i+skip+2].start]); ok {
				return id
			}
		}
		return noRank
	}
	for i := range len(parts) - 2 {
		parts[i].rank = pairRank(i, 0)
	}
	for len(parts) > 1 {
		low, at := uint32(noRank), -1
		for i, p := range parts[:len(parts)-1] {
			if p.rank < low {
				low, at = p.rank, i
			}
		}
		if at < 0 {
			break
		}
		parts[at].rank = pairRank(at, 1)
		if at > 0 {
			parts[at-1].rank = pairRank(at-1, 1)
		}
		parts = append(parts[:at+1], parts[at+2:]...)
	}
	return parts
}

// mergeLong is merge in O(n log n): the candidate pairs sit in a min-heap
// keyed by (rank, start), so the lowest rank, leftmost on a tie, comes
// first, exactly the pair the quadratic scan picks. The parts are a linked
// list by start. An entry goes stale when its part was merged away or its
// pair changed; a pair only changes by growing (its part or the next one
// took a neighbour), so its bytes, hence its rank, differ from the stale
// entry's, and a (rank, start) that no longer matches the part is skipped.
func (r *ranks) mergeLong(piece []byte, buf []part) []part {
	n := len(piece)
	next := make([]int32, n) // start of the part after the one at i; n for the last
	prev := make([]int32, n) // start of the part before; -1 for the first
	rk := make([]uint32, n)  // rank of the part at i joined with the next, noRank if none
	gone := make([]bool, n)  // i no longer starts a part
	h := make(pairHeap, 0, n)
	pairRank := func(i int32) uint32 {
		j := next[i]
		if int(j) >= n {
			return noRank
		}
		if id, ok := r.rank(piece[i:next[j]]); ok {
			return id
		}
		return noRank
	}
	for i := range n {
		next[i], prev[i] = int32(i+1), int32(i-1)
	}
	for i := range int32(n) {
		if rk[i] = pairRank(i); rk[i] != noRank {
			h = append(h, uint64(rk[i])<<32|uint64(i))
		}
	}
	h.init()
	for len(h) > 0 {
		e := h.pop()
		i, rank := int32(uint32(e)), uint32(e>>32)
		if gone[i] || rk[i] != rank {
			continue // stale
		}
		j := next[i]
		gone[j] = true
		next[i] = next[j]
		if int(next[i]) < n {
			prev[next[i]] = i
		}
		if rk[i] = pairRank(i); rk[i] != noRank {
			h.push(uint64(rk[i])<<32 | uint64(i))
		}
		if p := prev[i]; p >= 0 {
			if rk[p] = pairRank(p); rk[p] != noRank {
				h.push(uint64(rk[p])<<32 | uint64(p))
			}
		}
	}
	parts := buf[:0]
	for i := int32(0); int(i) < n; i = next[i] {
		parts = append(parts, part{start: int(i), rank: noRank})
	}
	return append(parts, part{start: n, rank: noRank})
}

// pairHeap is a binary min-heap of rank<<32 | start.
type pairHeap []uint64

func (h pairHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *pairHeap) push(v uint64) {
	*h = append(*h, v)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p] <= s[i] {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *pairHeap) pop() uint64 {
	s := *h
	v := s[0]
	last := len(s) - 1
	s[0] = s[last]
	*h = s[:last]
	h.down(0)
	return v
}

func (h pairHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r] < h[l] {
			m = r
		}
		if h[i] <= h[m] {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// encode appends the token ids of one pre-token to out.
func (r *ranks) encode(piece []byte, out []int) []int {
	if id, ok := r.rank(piece); ok {
		return append(out, int(id))
	}
	var buf [64]part
	parts := r.merge(piece, buf[:0])
	for i := range len(parts) - 1 {
		id, _ := r.rank(piece[parts[i].start:parts[i+1].start])
		out = append(out, int(id))
	}
	return out
}

// count returns the number of tokens of one pre-token.
func (r *ranks) count(piece []byte) int {
	if r.isToken(piece) {
		return 1
	}
	return r.mergeCount(piece)
}

// mergeCount returns the number of tokens the byte-pair merge makes of
// piece (not itself a token).
func (r *ranks) mergeCount(piece []byte) int {
	var buf [64]part
	return len(r.merge(piece, buf[:0])) - 1
}

// isToken reports whether b is one token. Every single byte is one.
func (r *ranks) isToken(b []byte) bool {
	if len(b) == 1 {
		return true
	}
	_, ok := r.rank(b)
	return ok
}
