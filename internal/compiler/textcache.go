package compiler

import (
	"cmp"
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
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
	texts        *generations[textKey, textVal]
	// spans: the parse's memory of long strings (knownStrings).
	spans *generations[uint64, spanVal]
	// messages: canonical message hashes by the message's bytes and
	// tenant (hasher.messageOf).
	messages *generations[textKey, artifact.Digest]
}

const textCacheEntries = 1 << 16

// messageEntries bounds each generation of messages: an entry is ~100
// bytes with the map's overhead, so both stay under ~4 MB, a few hundred
// conversations' histories.
const messageEntries = 1 << 14

type textKey struct {
	a, b uint64
	n    int
	body bool // the entry is the string's tool-result body (hasher.bodyOf)
}

// textVal is a string's digest and size; for a body entry, of the body
// within [lo, hi) of the raw string (hi 0: the whole string is the body).
type textVal struct {
	digest artifact.Digest
	chars  int
	lo, hi int
}

func newTextCache() *textCache {
	return &textCache{seedA: maphash.MakeSeed(), seedB: maphash.MakeSeed(),
		texts: newGenerations[textKey, textVal](textCacheEntries), spans: newGenerations[uint64, spanVal](spanEntries),
		messages: newGenerations[textKey, artifact.Digest](messageEntries)}
}

func (c *textCache) key(raw []byte) textKey {
	return textKey{a: maphash.Bytes(c.seedA, raw), b: maphash.Bytes(c.seedB, raw), n: len(raw)}
}

func (c *textCache) get(k textKey) (textVal, bool) { return c.texts.get(k) }

func (c *textCache) put(k textKey, v textVal) { c.texts.put(k, v) }

// rawText returns the text of raw JSON bytes taken as they are (a folded
// turn's exact messages). The digest and size come from the cache when
// these bytes were seen: a folded turn is resent on every request, and
// hashing it again would be much of a warm compile's work. The string is a
// read-only view of raw, not a copy: the body is never modified while a
// compile uses it. Raw bytes of a turn start with '{' and a long string's
// with '"', so the two kinds of entry never share a key. c may be nil.
func (c *textCache) rawText(raw []byte) *text {
	s := unsafe.String(unsafe.SliceData(raw), len(raw))
	if c == nil || len(raw) < longString {
		return &text{s: s, digest: rawIdentity(raw), chars: runeCount(raw)}
	}
	k := c.key(raw)
	if v, ok := c.get(k); ok {
		return &text{s: s, digest: v.digest, chars: v.chars}
	}
	t := &text{s: s, digest: rawIdentity(raw), chars: runeCount(raw)}
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

// The parse's memory of long strings (jsonv.Known): a tenant's long string
// is found again by a keyed hash of its first jsonv.KnownMin raw bytes and
// the tenant, and accepted only when its whole raw bytes have the text
// cache's key of a string validated before. So a resent tool result costs
// one pass of the keyed hash instead of the parser's scan, and the hasher
// reuses that key instead of hashing the string again. Keyed by tenant, so
// no tenant's parse is sped up by another's strings.
type spanEntry struct {
	key            textKey // key.n == 0: empty
	escaped, ascii bool
}

// spanVal holds the newest strings that share a start (a tool's fixed
// header, a file read again with other lines), newest first.
type spanVal [2]spanEntry

func (c *textCache) spanHash(tenant string, rest []byte) uint64 {
	return maphash.Bytes(c.seedA, rest[:jsonv.KnownMin]) ^ maphash.String(c.seedB, tenant)
}

func (c *textCache) spanGet(k uint64) spanVal {
	v, _ := c.spans.get(k)
	return v
}

func (c *textCache) spanPut(k uint64, e spanEntry) {
	c.spans.update(k, func(v spanVal) (spanVal, bool) {
		if v[0] == e {
			return v, false
		}
		return spanVal{e, v[0]}, true
	})
}

// spanEntries bounds each generation of spans: an entry is ~120 bytes
// with the map's overhead, so both stay under ~8 MB. A miss only costs the
// scan the parse would have made anyway.
const spanEntries = 1 << 15

// knownStrings is one parse's jsonv.Known: it answers from the cache and
// keeps the key of every long string it hashed, by start offset, for the
// hasher (hasher.key).
type knownStrings struct {
	cache   *textCache
	tenant  string
	keys    []spanKey // ascending by start: the parser meets strings in source order
	skipped int       // strings whose scan the cache saved
}

// spanKey is the cache key of the long string starting at start, with
// its parse flags (for unchangedStrings).
type spanKey struct {
	start          int
	key            textKey
	escaped, ascii bool
}

// spanIndex returns where the span starting at start is in spans (sorted
// by start), or would be, and whether it is there.
func spanIndex(spans []spanKey, start int) (int, bool) {
	return slices.BinarySearchFunc(spans, start, func(e spanKey, s int) int { return cmp.Compare(e.start, s) })
}

// keyAt returns the key kept for the string starting at start.
func (k *knownStrings) keyAt(start int) (textKey, bool) {
	i, ok := spanIndex(k.keys, start)
	if !ok {
		return textKey{}, false
	}
	return k.keys[i].key, true
}

// newKnownStrings returns nil without a cache.
func newKnownStrings(c *textCache, tenant string) *knownStrings {
	if c == nil {
		return nil
	}
	return &knownStrings{cache: c, tenant: tenant, keys: make([]spanKey, 0, 64)}
}

func (k *knownStrings) String(src []byte, start int) (end int, escaped, ascii, ok bool) {
	rest := src[start:]
	for _, e := range k.cache.spanGet(k.cache.spanHash(k.tenant, rest)) {
		if e.key.n == 0 || e.key.n > len(rest) {
			continue
		}
		if key := k.cache.key(rest[:e.key.n]); key == e.key {
			k.keys = append(k.keys, spanKey{start, key, e.escaped, e.ascii})
			k.skipped++
			return start + e.key.n, e.escaped, e.ascii, true
		}
	}
	return 0, false, false, false
}

func (k *knownStrings) Scanned(src []byte, start, end int, escaped, ascii bool) {
	key := k.cache.key(src[start:end])
	k.keys = append(k.keys, spanKey{start, key, escaped, ascii})
	k.cache.spanPut(k.cache.spanHash(k.tenant, src[start:]), spanEntry{key: key, escaped: escaped, ascii: ascii})
}
