package compiler

import (
	"encoding/binary"
	"hash/maphash"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// rawCounts remembers the token counts of original bodies, so a request
// resent whole (a retry, a client that resends before it appends) costs
// the token gate no pass over its megabyte: the counter would hash every
// byte of it to find its cached counts. The key is built from what the
// parse already has (bodyKey), so computing it costs a pass over the short
// parts between the long strings only. Counts are a function of the bytes,
// the model and the counter, and a Compiler has one counter, so a
// remembered count is the count; only measured counts are kept (not one
// cut short by the budget).
type rawCounts = generations[textKey, artifact.TokenCount]

// rawCountEntries bounds each generation; an entry is ~100 bytes.
const rawCountEntries = 1 << 12

func newRawCounts() *rawCounts { return newGenerations[textKey, artifact.TokenCount](rawCountEntries) }

// bodyKey is a 128-bit keyed hash of all of src, for the tenant and model
// in salt: the bytes between the long strings the parse hashed, each long
// string by its text-cache key (which names its bytes as surely as the
// bytes do) and every length, so two bodies share a key only if they are
// the same bytes. ok is false without the parse's keys.
func (k *knownStrings) bodyKey(src []byte, salt string) (key textKey, ok bool) {
	return k.rangeKey(src, 0, len(src), salt)
}

// rangeKey is bodyKey for src[lo:hi] (a message: see hasher.messageOf).
// The long strings inside the range stand for their bytes; one that
// crosses its end gives no key.
func (k *knownStrings) rangeKey(src []byte, lo, hi int, salt string) (key textKey, ok bool) {
	if k == nil || lo < 0 || hi > len(src) || lo > hi {
		return textKey{}, false
	}
	var ha, hb maphash.Hash
	ha.SetSeed(k.cache.seedA)
	hb.SetSeed(k.cache.seedB)
	var buf [8 * 3]byte
	write := func(b []byte) { ha.Write(b); hb.Write(b) }
	// Each run of bytes between the long strings goes in after its length,
	// so no two sequences of runs and keys make the same input.
	gap := func(b []byte) {
		binary.LittleEndian.PutUint64(buf[:8], uint64(len(b)))
		write(buf[:8])
		write(b)
	}
	binary.LittleEndian.PutUint64(buf[:8], uint64(len(salt)))
	write(buf[:8])
	ha.WriteString(salt)
	hb.WriteString(salt)
	pos := lo
	first, _ := spanIndex(k.keys, lo)
	for _, sk := range k.keys[first:] {
		s, e := sk.start, sk.key
		if s >= hi {
			break
		}
		if s < pos || s+e.n > hi {
			return textKey{}, false // not the spans of src's strings
		}
		gap(src[pos:s])
		binary.LittleEndian.PutUint64(buf[0:], e.a)
		binary.LittleEndian.PutUint64(buf[8:], e.b)
		binary.LittleEndian.PutUint64(buf[16:], uint64(e.n))
		write(buf[:24])
		pos = s + e.n
	}
	gap(src[pos:hi])
	return textKey{a: ha.Sum64(), b: hb.Sum64(), n: hi - lo}, true
}
