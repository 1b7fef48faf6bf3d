package compiler

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"sync"
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
