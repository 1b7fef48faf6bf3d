package compiler

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// longString is the size from which a string's canonical form is its
// digest. Tool results are long strings: hashing them once serves both the
// conversation chain and the artifact identity.
const longString = 1024

// text is a string value with its digests and size. The decoded string is
// made only when it is needed (an artifact being stored, a summary), since
// a warm request needs only digests.
type text struct {
	// digest is the artifact identity (artifact.DigestOf of the text and the
	// raw bytes a receipt would replace), set for tool-result texts (slots)
	// and folded turns.
	digest artifact.Digest
	// canon is sha256 of the decoded text: a long string's canonical form
	// in the conversation chain, which ignores escape spelling.
	canon artifact.Digest
	chars int
	s     string
	node  *jsonv.Node // decoded on demand from src, when set
	src   []byte
	span  []byte // or raw string content decoded on demand (a body inside its wrapper)
}

// str returns the decoded string.
func (t *text) str() string {
	if t.node != nil {
		t.s, _ = t.node.Text(t.src)
		t.node = nil
	}
	if t.span != nil {
		t.s = string(jsonv.AppendUnquoted(nil, t.span))
		t.span = nil
	}
	return t.s
}

// rawIdentity is the artifact identity of content whose text is its raw
// bytes (a folded turn's exact messages): one hash serves both.
func rawIdentity(raw []byte) artifact.Digest {
	sum := sha256.Sum256(raw)
	return artifact.DigestOfSums(sum, sum)
}

// hasher computes canonical message hashes. The canonical form ignores key
// order, whitespace, escape spelling and cache_control markers (which some
// clients move on every step), so a conversation is recognised however its
// client serialises it.
type hasher struct {
	src   []byte
	h     hash.Hash
	buf   [8]byte
	long  map[*jsonv.Node]*text
	cache *textCache    // may be nil
	known *knownStrings // the parse's keys of long strings; may be nil
	// Scratch reused across nodes, so walking a message allocates nothing:
	// the member order of the objects being walked (a stack, as objects
	// nest) and decoded short strings.
	idx []int
	dec []byte
	// remembered counts the messages whose hash messageOf found.
	remembered int
}

var decodeBuf = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

func newHasher(src []byte, cache *textCache) *hasher {
	return &hasher{src: src, h: sha256.New(), long: make(map[*jsonv.Node]*text), cache: cache}
}

// textOf returns the canonical digest and size of a string node, memoised
// for long strings, from the process cache when this exact raw string was
// seen. Its artifact identity (digest) is set by bodyOf, for slots only.
func (c *hasher) textOf(n *jsonv.Node) *text { return c.textOfKey(n, nil) }

// textOfKey is textOf with the cache key of n's raw bytes, when known.
func (c *hasher) textOfKey(n *jsonv.Node, key *textKey) *text {
	if t, ok := c.long[n]; ok {
		return t
	}
	raw := n.Raw(c.src)
	long := len(raw) >= longString
	var k textKey
	if long && c.cache != nil {
		if key != nil {
			k = *key
		} else {
			k = c.key(n, raw)
		}
		if v, ok := c.cache.get(k); ok {
			t := &text{canon: v.digest, chars: v.chars, node: n, src: c.src}
			c.long[n] = t
			return t
		}
	}
	// Decode into a pooled buffer: only the digest and size are kept; the
	// string itself is decoded again if it is ever stored.
	bp := decodeBuf.Get().(*[]byte)
	b := n.AppendText((*bp)[:0], c.src)
	t := c.decoded(n, k, long, b)
	*bp = b[:0]
	decodeBuf.Put(bp)
	return t
}

// decoded is textOf for a string node whose text b the caller decoded
// (k is its cache key when long): its digest and size, memoised like
// textOf's. b is not kept: the text is decoded again only if it is stored,
// and most first-seen texts are not (they go inline).
func (c *hasher) decoded(n *jsonv.Node, k textKey, long bool, b []byte) *text {
	t := &text{canon: sha256.Sum256(b), chars: len(b), node: n, src: c.src}
	if !n.ASCII || n.Escaped {
		t.chars = runeCount(b)
	}
	if long {
		c.long[n] = t
		if c.cache != nil {
			c.cache.put(k, textVal{digest: t.canon, chars: t.chars})
		}
	}
	return t
}

// key is the cache key of n's raw bytes: the one the parse computed when
// it hashed the string (knownStrings), else a new one.
func (c *hasher) key(n *jsonv.Node, raw []byte) textKey {
	if c.known != nil {
		if k, ok := c.known.keyAt(n.Start); ok && k.n == len(raw) {
			return k
		}
	}
	return c.cache.key(raw)
}

// bodyOf returns the stable body of a tool result string (see
// splitWrapper) and the source range the receipt replaces: the whole string
// value, or the body's raw span inside it when the client wrapped it.
// Identity, duplicates and leases use this body; the wrapper stays inline.
func (c *hasher) bodyOf(n *jsonv.Node) (t *text, start, end int) {
	raw := n.Raw(c.src)
	var k, bk textKey
	cached := c.cache != nil && len(raw) >= longString
	if cached {
		k = c.key(n, raw)
		bk = k
		bk.body = true
		if v, ok := c.cache.get(bk); ok {
			if v.hi == 0 { // all body: the string's own text, with this identity
				t := c.textOfKey(n, &k)
				t.digest = v.digest
				return t, n.Start, n.End
			}
			return &text{digest: v.digest, chars: v.chars, src: c.src, span: raw[v.lo:v.hi]}, n.Start + v.lo, n.Start + v.hi
		}
	}
	// Not seen yet: the rules read the decoded text (a wrapper may be
	// spelled with any escapes), once; the cache remembers the split. It
	// is decoded into a pooled buffer, since nothing keeps it.
	bp := decodeBuf.Get().(*[]byte)
	b := n.AppendText((*bp)[:0], c.src)
	defer func() {
		*bp = b[:0]
		decodeBuf.Put(bp)
	}()
	lo, hi := splitWrapper(unsafe.String(unsafe.SliceData(b), len(b)))
	rlo, okLo := jsonv.RawOffset(raw, lo)
	rhi, okHi := jsonv.RawOffset(raw, hi)
	if (lo == 0 && hi == len(b)) || !okLo || !okHi || rlo > rhi {
		// The whole string is the body: its digest comes from b, not
		// from decoding it again.
		t, ok := c.long[n]
		if !ok {
			t = c.decoded(n, k, len(raw) >= longString, b)
		}
		t.digest = artifact.DigestOfSums(t.canon, sha256.Sum256(raw))
		if cached {
			c.cache.put(bk, textVal{digest: t.digest, chars: t.chars})
		}
		return t, n.Start, n.End
	}
	body := b[lo:hi]
	t = &text{digest: artifact.DigestOfSums(sha256.Sum256(body), sha256.Sum256(raw[rlo:rhi])), chars: runeCount(body), src: c.src, span: raw[rlo:rhi]}
	if cached {
		c.cache.put(bk, textVal{digest: t.digest, chars: t.chars, lo: rlo, hi: rhi})
	}
	return t, n.Start + rlo, n.Start + rhi
}

// messageOf is message, remembered by the message's bytes: a resent
// history's messages are the bytes of the last request's, and walking them
// again (their keys sorted, their short strings decoded and hashed) was a
// tenth of a warm compile. The key is the parse's keyed hash of those
// bytes (knownStrings.rangeKey), for the tenant, so no tenant's compile is
// sped up by another's messages. A canonical hash is a function of the
// bytes alone, so a remembered one is the one message would compute.
func (c *hasher) messageOf(n *jsonv.Node) artifact.Digest {
	if c.cache == nil || c.known == nil {
		return c.message(n)
	}
	k, ok := c.known.rangeKey(c.src, n.Start, n.End, c.known.tenant)
	if !ok {
		return c.message(n)
	}
	if d, ok := c.cache.messages.get(k); ok {
		c.remembered++
		return d
	}
	d := c.message(n)
	c.cache.messages.put(k, d)
	return d
}

// message returns the canonical hash of one message.
func (c *hasher) message(n *jsonv.Node) artifact.Digest {
	c.h.Reset()
	c.node(n)
	var d artifact.Digest
	c.h.Sum(d[:0])
	return d
}

func (c *hasher) num(v int) {
	binary.LittleEndian.PutUint64(c.buf[:], uint64(v))
	c.h.Write(c.buf[:])
}

// tag writes one byte (through c.buf: a literal would be allocated on
// every call, since Write takes an interface's slice).
func (c *hasher) tag(b ...byte) {
	n := copy(c.buf[:], b)
	c.h.Write(c.buf[:n])
}

// str writes s without copying it (Write only reads).
func (c *hasher) str(s string) {
	c.h.Write(unsafe.Slice(unsafe.StringData(s), len(s)))
}

func (c *hasher) node(n *jsonv.Node) {
	switch n.Kind {
	case jsonv.Null:
		c.tag('n')
	case jsonv.Bool:
		c.tag('b', c.src[n.Start])
	case jsonv.Number:
		c.tag('d')
		c.num(n.End - n.Start)
		c.h.Write(c.src[n.Start:n.End])
	case jsonv.String:
		if n.End-n.Start >= longString {
			t := c.textOf(n)
			c.tag('S')
			c.h.Write(t.canon[:])
			return
		}
		c.tag('s')
		if !n.Escaped {
			c.num(n.End - n.Start - 2)
			c.h.Write(c.src[n.Start+1 : n.End-1])
			return
		}
		c.dec = n.AppendText(c.dec[:0], c.src)
		c.num(len(c.dec))
		c.h.Write(c.dec)
	case jsonv.Array:
		c.tag('[')
		c.num(len(n.Elems))
		for _, e := range n.Elems {
			c.node(e)
		}
	case jsonv.Object:
		// Members in key order (keys are unique: the parser refuses
		// duplicates), without cache_control and client metadata the
		// provider never renders (canonIgnored).
		mark := len(c.idx)
		for i, m := range n.Members {
			if !canonIgnored(m.Key) {
				c.idx = append(c.idx, i)
			}
		}
		idx := c.idx[mark:]
		slices.SortFunc(idx, func(a, b int) int { return strings.Compare(n.Members[a].Key, n.Members[b].Key) })
		c.tag('{')
		c.num(len(idx))
		for k := range idx {
			m := n.Members[c.idx[mark+k]] // c.idx may move as nested objects push
			c.num(len(m.Key))
			c.str(m.Key)
			c.node(m.Value)
		}
		c.idx = c.idx[:mark]
	default:
		// No parse makes another kind: a tree read after its arena was
		// reset (jsonv.Arena.ResetPoisoned in tests) stops here.
		panic("compiler: a node of no JSON kind")
	}
}

// canonIgnored reports the object keys the canonical form leaves out:
// cache_control, which some clients move on every step, and Codex's
// internal_chat_message_metadata_passthrough, the client's own note on
// each history item (its turn id, when it was made), which the provider's
// output items do not carry: without it an output item as the provider
// lists it hashes like the client's re-sent copy (continuation.go).
func canonIgnored(key string) bool {
	return key == "cache_control" || key == "internal_chat_message_metadata_passthrough"
}

// chain returns h_i = H(h_{i-1}, m_i) for every unit, seeded by the format
// name so that the same messages in two formats are two conversations.
func (c *hasher) chain(format provider.Format, units []*jsonv.Node) []artifact.Digest {
	out := make([]artifact.Digest, len(units))
	prev := sha256.Sum256([]byte("token-terminator/chain/v1/" + format))
	var buf [64]byte
	for i, u := range units {
		m := c.messageOf(u)
		copy(buf[:32], prev[:])
		copy(buf[32:], m[:])
		prev = sha256.Sum256(buf[:])
		out[i] = prev
	}
	return out
}
