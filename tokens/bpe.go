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

// merge runs tiktoken's byte-pair merge on piece (not itself a token):
// repeatedly join the adjacent pair whose joint bytes have the lowest rank,
// the leftmost one on a tie, until no pair is a token. It returns the
// starts of the final tokens followed by len(piece), in buf's storage.
// Like tiktoken-go's, it is quadratic in len(piece); callers bound it.
func (r *ranks) merge(piece []byte, buf []part) []part {
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
