package compiler

import (
	"crypto/sha256"
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"sync"
	"unsafe"
)

// textCache remembers the digest and size of long strings by a keyed hash
// of their raw JSON bytes. Agents resend their whole history on every call,
// so almost every long string of a request was seen a moment ago: the cache
// turns decoding, SHA-256 and counting of a megabyte of history into one
// pass of a fast keyed hash. The key is 128 bits from two random per-process
// seeds plus the length, so a collision (which would name the wrong
// artifact) is out of reach even for a client choosing its inputs.
//
// It holds two generations of at most textCacheEntries each: when the
// current one fills, it becomes the previous one and the oldest is dropped.
// Entries are ~80 bytes, so the cache stays under ~10 MB.
type textCache struct {
	seedA, seedB maphash.Seed
	mu           sync.Mutex
	cur, prev    map[textKey]textVal
}

const textCacheEntries = 1 << 16

type textKey struct {
	a, b uint64
	n    int
	body bool // the entry is the string's tool-result body (hasher.bodyOf)
}

// textVal is a string's digest and size; for a body entry, of the body
// within [lo, hi) of the raw string (hi 0: the whole string is the body).
type textVal struct {
	digest Digest
	chars  int
	lo, hi int
}

func newTextCache() *textCache {
	return &textCache{seedA: maphash.MakeSeed(), seedB: maphash.MakeSeed(), cur: map[textKey]textVal{}}
}

func (c *textCache) key(raw []byte) textKey {
	return textKey{a: maphash.Bytes(c.seedA, raw), b: maphash.Bytes(c.seedB, raw), n: len(raw)}
}

func (c *textCache) get(k textKey) (textVal, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.cur[k]; ok {
		return v, true
	}
	v, ok := c.prev[k]
	if ok {
		c.putLocked(k, v)
	}
	return v, ok
}

func (c *textCache) put(k textKey, v textVal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(k, v)
}

func (c *textCache) putLocked(k textKey, v textVal) {
	if len(c.cur) >= textCacheEntries {
		c.prev, c.cur = c.cur, make(map[textKey]textVal, textCacheEntries/4)
	}
	c.cur[k] = v
}

// rawText returns the text of raw JSON bytes taken as they are (a folded
// turn's exact messages). The digest and size come from the cache when
// these bytes were seen: a folded turn is resent on every request, and
// hashing it again was a sixth of a warm compile. The string is a
// read-only view of raw, not a copy: the body is never modified while a
// compile uses it. Raw bytes of a turn start with '{' and a long string's
// with '"', so the two kinds of entry never share a key. c may be nil.
func (c *textCache) rawText(raw []byte) *text {
	s := unsafe.String(unsafe.SliceData(raw), len(raw))
	if c == nil || len(raw) < longString {
		return &text{s: s, digest: sha256.Sum256(raw), chars: runeCount(raw)}
	}
	k := c.key(raw)
	if v, ok := c.get(k); ok {
		return &text{s: s, digest: v.digest, chars: v.chars}
	}
	t := &text{s: s, digest: sha256.Sum256(raw), chars: runeCount(raw)}
	c.put(k, textVal{digest: t.digest, chars: t.chars})
	return t
}

// runeCount counts the code points of valid UTF-8: its length less its
// continuation bytes (10xxxxxx), counted eight bytes at a time.
func runeCount(b []byte) int {
	cont := 0
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		cont += bits.OnesCount64(x & ^(x << 1) & 0x8080808080808080)
	}
	for ; i < len(b); i++ {
		if b[i]&0xC0 == 0x80 {
			cont++
		}
	}
	return len(b) - cont
}
