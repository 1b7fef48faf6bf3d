// Package jsonv parses JSON into a tree that remembers where every value
// sits in the source bytes. The compiler edits requests by splicing new bytes
// into those spans, so everything it does not replace stays byte-identical:
// key order, number spelling, escapes and whitespace.
//
// The parser is strict (RFC 8259): invalid UTF-8, control characters in
// strings, duplicate object keys, trailing garbage and nesting deeper than
// the limit are errors. A request the compiler cannot read unambiguously is
// one it must not rewrite.
package jsonv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// Kind is the JSON type of a Node.
type Kind uint8

const (
	Null Kind = iota
	Bool
	Number
	String
	Array
	Object
)

func (k Kind) String() string {
	return [...]string{"null", "bool", "number", "string", "array", "object"}[k]
}

// Node is one JSON value and its byte span [Start, End) in the source.
type Node struct {
	Kind       Kind
	Start, End int
	// Escaped is set on strings that contain a backslash escape; ASCII on
	// strings whose source bytes are all ASCII (escapes may still decode to
	// other characters).
	Escaped, ASCII bool
	Members        []Member // objects, in source order
	Elems          []*Node  // arrays
}

// Member is one key/value pair of an object.
type Member struct {
	Key   string
	Value *Node
}

// MaxDepth is the default nesting limit.
const MaxDepth = 512

// ErrDepth is returned when nesting exceeds the limit.
var ErrDepth = errors.New("jsonv: nesting too deep")

// SyntaxError reports invalid JSON at an offset.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("jsonv: %s at offset %d", e.Msg, e.Offset) }

type parser struct {
	src      []byte
	pos      int
	depth    int
	maxDepth int
	nodes    int
	slab     []Node            // nodes are handed out from here, a chunk at a time
	keys     map[string]string // object keys seen so far, so each spelling is allocated once
	// Members and elements of the containers being parsed are collected on
	// these stacks (a nested container pushes above its parent's and pops
	// back when it ends); a finished container gets an exact-size copy from
	// a slab, so growing them costs no allocation per container.
	members []Member
	elems   []*Node
	mslab   []Member
	eslab   []*Node
	known   Known  // may be nil
	arena   *Arena // where the slabs come from; nil: the heap
}

// containerChunk is how many members (or elements) one slab allocation
// holds; a container larger than that gets its own.
const containerChunk = 256

// takeMembers moves the members pushed since mark into slab memory and
// pops them. The slice is capped at its length, so an append by a caller
// copies instead of writing over a neighbour.
func (p *parser) takeMembers(mark int) []Member {
	src := p.members[mark:]
	k := len(src)
	if len(p.mslab) < k {
		if p.arena != nil {
			p.mslab = p.arena.members.take(max(containerChunk, k))
		} else {
			p.mslab = make([]Member, max(containerChunk, k))
		}
	}
	out := p.mslab[:k:k]
	p.mslab = p.mslab[k:]
	copy(out, src)
	clear(src) // the stack holds no pointers into finished trees
	p.members = p.members[:mark]
	return out
}

// takeElems is takeMembers for array elements.
func (p *parser) takeElems(mark int) []*Node {
	src := p.elems[mark:]
	k := len(src)
	if len(p.eslab) < k {
		if p.arena != nil {
			p.eslab = p.arena.elems.take(max(containerChunk, k))
		} else {
			p.eslab = make([]*Node, max(containerChunk, k))
		}
	}
	out := p.eslab[:k:k]
	p.eslab = p.eslab[k:]
	copy(out, src)
	clear(src)
	p.elems = p.elems[:mark]
	return out
}

// nodeChunk is how many nodes one allocation holds: a request's tree is
// thousands of small nodes that live and die together, so allocating them
// in chunks saves most of the allocations and the collector's work.
const nodeChunk = 128

// node returns a new node from the slab.
func (p *parser) node(n Node) *Node {
	if len(p.slab) == 0 {
		if p.arena != nil {
			p.slab = p.arena.nodes.take(nodeChunk)
		} else {
			p.slab = make([]Node, min(nodeChunk, max(p.nodes, 8)))
		}
	}
	nd := &p.slab[0]
	p.slab = p.slab[1:]
	*nd = n
	return nd
}

// key returns the decoded object key at src[ks:end]. Unescaped keys are
// interned: a request repeats the same few keys ("role", "content", ...)
// hundreds of times.
func (p *parser) key(ks int, escaped bool) string {
	if escaped {
		return decodeString(p.src[ks:p.pos], true)
	}
	raw := p.src[ks+1 : p.pos-1]
	if k, ok := p.keys[string(raw)]; ok {
		return k
	}
	if p.keys == nil {
		p.keys = make(map[string]string, 16)
	}
	k := string(raw)
	p.keys[k] = k
	return k
}

// MaxNodes bounds the values of one document. A node costs ~100 bytes, so a
// body of tiny values ("[0,0,0,...]") would otherwise cost some fifty times
// its size in memory; real requests have a few values per hundred bytes.
const MaxNodes = 1 << 20

// ErrTooManyNodes is returned when a document holds more than MaxNodes values.
var ErrTooManyNodes = errors.New("jsonv: too many values")

// Parse parses src, which must hold exactly one JSON value (surrounding
// whitespace allowed). maxDepth <= 0 means MaxDepth.
func Parse(src []byte, maxDepth int) (*Node, error) { return ParseKnown(src, maxDepth, nil) }

// Known remembers long strings a parse has already validated, so a parse
// of the next request, which resends them, can skip their scan. Agents
// resend their whole history on every call, and scanning its long strings
// (tool results) is most of a parse.
//
// Parse asks only about strings whose first KnownMin bytes (from the
// opening quote) hold no closing quote, so a short string costs no lookup.
type Known interface {
	// String is given the source and the offset of a string's opening
	// quote. It returns the end (after the closing quote) and flags of a
	// string validated before that src[start:] starts with, or ok false.
	// It must answer only for bytes equal to a string it was told about by
	// Scanned.
	String(src []byte, start int) (end int, escaped, ascii, ok bool)
	// Scanned tells of a long string the parser validated: src[start:end]
	// runs from its opening quote to its closing one.
	Scanned(src []byte, start, end int, escaped, ascii bool)
}

// KnownMin is the raw length from which Parse consults Known.
const KnownMin = 1024

// ParseKnown is Parse that skips the scan of the long strings known holds
// (known may be nil). The tree is the one Parse would build.
func ParseKnown(src []byte, maxDepth int, known Known) (*Node, error) {
	return ParseIn(nil, src, maxDepth, known)
}

// ParseIn is ParseKnown with the tree's nodes in a (nil: the heap). The
// tree is the one Parse would build, and it stays valid until a.Reset.
func ParseIn(a *Arena, src []byte, maxDepth int, known Known) (*Node, error) {
	if maxDepth <= 0 {
		maxDepth = MaxDepth
	}
	p := &parser{src: src, maxDepth: maxDepth, known: known}
	if a != nil {
		a.begin(p)
		defer a.end(p)
	}
	p.skipSpace()
	n, err := p.value()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(src) {
		return nil, p.errf("trailing data")
	}
	return n, nil
}

func (p *parser) errf(msg string) error { return &SyntaxError{Offset: p.pos, Msg: msg} }

func (p *parser) skipSpace() {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value() (*Node, error) {
	if p.pos >= len(p.src) {
		return nil, p.errf("unexpected end")
	}
	if p.nodes++; p.nodes > MaxNodes {
		return nil, ErrTooManyNodes
	}
	switch c := p.src[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		start := p.pos
		esc, ascii, err := p.str()
		if err != nil {
			return nil, err
		}
		return p.node(Node{Kind: String, Start: start, End: p.pos, Escaped: esc, ASCII: ascii}), nil
	case c == 't':
		return p.literal("true", Bool)
	case c == 'f':
		return p.literal("false", Bool)
	case c == 'n':
		return p.literal("null", Null)
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return nil, p.errf("unexpected character")
	}
}

func (p *parser) literal(word string, k Kind) (*Node, error) {
	if len(p.src)-p.pos < len(word) || string(p.src[p.pos:p.pos+len(word)]) != word {
		return nil, p.errf("invalid literal")
	}
	n := p.node(Node{Kind: k, Start: p.pos, End: p.pos + len(word)})
	p.pos += len(word)
	return n, nil
}

func (p *parser) number() (*Node, error) {
	start := p.pos
	s := p.src
	if p.pos < len(s) && s[p.pos] == '-' {
		p.pos++
	}
	switch {
	case p.pos < len(s) && s[p.pos] == '0':
		p.pos++
	case p.pos < len(s) && s[p.pos] >= '1' && s[p.pos] <= '9':
		for p.pos < len(s) && s[p.pos] >= '0' && s[p.pos] <= '9' {
			p.pos++
		}
	default:
		return nil, p.errf("invalid number")
	}
	if p.pos < len(s) && s[p.pos] == '.' {
		p.pos++
		if !p.digits() {
			return nil, p.errf("invalid number")
		}
	}
	if p.pos < len(s) && (s[p.pos] == 'e' || s[p.pos] == 'E') {
		p.pos++
		if p.pos < len(s) && (s[p.pos] == '+' || s[p.pos] == '-') {
			p.pos++
		}
		if !p.digits() {
			return nil, p.errf("invalid number")
		}
	}
	return p.node(Node{Kind: Number, Start: start, End: p.pos}), nil
}

func (p *parser) digits() bool {
	start := p.pos
	for p.pos < len(p.src) && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
		p.pos++
	}
	return p.pos > start
}

// str scans a string starting at the opening quote and leaves pos after the
// closing quote. It validates escapes, control characters and UTF-8 in one
// pass. Tool output is most of a request, so plain ASCII runs are skipped
// eight bytes at a time, and each stop lands exactly on the first byte that
// needs a look (a quote, a backslash, a control character or a non-ASCII
// byte) instead of walking up to it byte by byte.
func (p *parser) str() (escaped, ascii bool, err error) {
	start := p.pos
	if p.known == nil || len(p.src)-start <= KnownMin {
		return p.scan(p.src)
	}
	// Most strings are short, and a scan of their first bytes finds their
	// end (a scan cut off there fails, also when the cut splits an escape
	// or a character). Past those, a string whose first KnownMin bytes
	// hold its closing quote is scanned whole; the look for that quote is
	// a byte search, since scanning a long string's start would be done
	// again when Known misses, and for nothing when it answers.
	if escaped, ascii, err = p.scan(p.src[:start+shortLook]); err == nil {
		return escaped, ascii, nil
	}
	p.pos = start
	if closes(p.src[start+1 : start+KnownMin]) {
		return p.scan(p.src)
	}
	if end, esc, asc, ok := p.known.String(p.src, start); ok {
		p.pos = end
		return esc, asc, nil
	}
	if escaped, ascii, err = p.scan(p.src); err == nil && p.pos-start > KnownMin {
		p.known.Scanned(p.src, start, p.pos, escaped, ascii)
	}
	return escaped, ascii, err
}

// shortLook is how far str scans a string before it looks for its end.
const shortLook = 128

// closes reports whether w, the bytes after a string's opening quote, holds
// a quote no backslash escapes, which ends the string if it is valid: a
// quote is escaped when an odd run of backslashes precedes it (an escape is
// a backslash and one character, or \u and four hex digits). It only
// chooses the way a string is parsed: Known answers for bytes equal to a
// valid string, and the scan judges everything else.
func closes(w []byte) bool {
	for i := 0; ; {
		q := bytes.IndexByte(w[i:], '"')
		if q < 0 {
			return false
		}
		q += i
		run := 0
		for k := q - 1; k >= 0 && w[k] == '\\'; k-- {
			run++
		}
		if run%2 == 0 {
			return true
		}
		i = q + 1
	}
}

// scan is str over s, a prefix of the source (all of it but for str's
// first look at a long string).
func (p *parser) scan(s []byte) (escaped, ascii bool, err error) {
	i := p.pos + 1 // after the opening quote
	ascii = true
	for {
		for i+8 <= len(s) {
			m := stopMask(binary.LittleEndian.Uint64(s[i:]))
			if m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= len(s) {
			p.pos = i
			return false, false, p.errf("unterminated string")
		}
		switch c := s[i]; {
		case c == '"':
			p.pos = i + 1
			return escaped, ascii, nil
		case c == '\\':
			escaped = true
			if i+1 >= len(s) {
				p.pos = i
				return false, false, p.errf("unexpected end in escape")
			}
			switch s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(s) {
					p.pos = i
					return false, false, p.errf("short unicode escape")
				}
				for _, h := range s[i+2 : i+6] {
					if unhex(h) < 0 {
						p.pos = i
						return false, false, p.errf("invalid unicode escape")
					}
				}
				i += 6
			default:
				p.pos = i
				return false, false, p.errf("invalid escape")
			}
		case c < 0x20:
			p.pos = i
			return false, false, p.errf("control character in string")
		case c >= utf8.RuneSelf:
			// The bytes of a multi-byte sequence are all >= 0x80, so a
			// quote or backslash can never hide inside one.
			ascii = false
			size := runeLen(s[i:])
			if size == 0 {
				p.pos = i
				return false, false, p.errf("invalid UTF-8 in string")
			}
			i += size
		default:
			i++ // plain byte of the last, short block
		}
	}
}

// runeLen returns the length of the valid UTF-8 sequence b starts with
// (b[0] >= 0x80), or 0 if it is invalid, exactly as utf8.DecodeRune judges
// (no overlongs, no surrogates, nothing past U+10FFFF). Two- and three-byte
// sequences, most non-ASCII text, are checked inline.
func runeLen(b []byte) int {
	c := b[0]
	cont := func(k int) bool { return k < len(b) && b[k]&0xC0 == 0x80 }
	switch {
	case c >= 0xC2 && c <= 0xDF:
		if cont(1) {
			return 2
		}
		return 0
	case c >= 0xE0 && c <= 0xEF:
		if !cont(1) || !cont(2) {
			return 0
		}
		switch c1 := b[1]; {
		case c == 0xE0 && c1 < 0xA0, c == 0xED && c1 > 0x9F: // overlong; surrogate
			return 0
		}
		return 3
	}
	if r, size := utf8.DecodeRune(b); r != utf8.RuneError || size != 1 {
		return size
	}
	return 0
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// stopMask has the high bit set in each of the eight bytes of x that is a
// quote, a backslash, a control character or non-ASCII (the classic SWAR
// byte tests). A test's borrow can only mark bytes above a byte it truly
// matched, so the lowest set bit is always exact.
func stopMask(x uint64) uint64 {
	return hasZero(x^(ones*'"')) | hasZero(x^(ones*'\\')) | ((x - ones*0x20) &^ x & highs) | (x & highs)
}

// hasZero has the high bit set in each zero byte of v, and possibly in
// bytes above one: the lowest set bit is exact.
func hasZero(v uint64) uint64 { return (v - ones) & ^v & highs }

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > p.maxDepth {
		return ErrDepth
	}
	return nil
}

func (p *parser) object() (*Node, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	n := p.node(Node{Kind: Object, Start: p.pos})
	var seen map[string]struct{}
	p.pos++
	p.skipSpace()
	if p.pos < len(p.src) && p.src[p.pos] == '}' {
		p.pos++
		n.End = p.pos
		p.depth--
		return n, nil
	}
	mark := len(p.members)
	for {
		if p.pos >= len(p.src) || p.src[p.pos] != '"' {
			return nil, p.errf("expected object key")
		}
		ks := p.pos
		esc, _, err := p.str()
		if err != nil {
			return nil, err
		}
		key := p.key(ks, esc)
		// Small objects are scanned; large ones get a set, so a body of one
		// object with many keys stays linear.
		if mine := p.members[mark:]; len(mine) < 16 {
			for _, m := range mine {
				if m.Key == key {
					return nil, p.errf("duplicate key")
				}
			}
		} else {
			if seen == nil {
				seen = make(map[string]struct{}, 32)
				for _, m := range mine {
					seen[m.Key] = struct{}{}
				}
			}
			if _, dup := seen[key]; dup {
				return nil, p.errf("duplicate key")
			}
			seen[key] = struct{}{}
		}
		p.skipSpace()
		if p.pos >= len(p.src) || p.src[p.pos] != ':' {
			return nil, p.errf("expected colon")
		}
		p.pos++
		p.skipSpace()
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		p.members = append(p.members, Member{Key: key, Value: v})
		p.skipSpace()
		if p.pos >= len(p.src) {
			return nil, p.errf("unexpected end in object")
		}
		switch p.src[p.pos] {
		case ',':
			p.pos++
			p.skipSpace()
		case '}':
			p.pos++
			n.End = p.pos
			n.Members = p.takeMembers(mark)
			p.depth--
			return n, nil
		default:
			return nil, p.errf("expected comma or end of object")
		}
	}
}

func (p *parser) array() (*Node, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	n := p.node(Node{Kind: Array, Start: p.pos})
	p.pos++
	p.skipSpace()
	if p.pos < len(p.src) && p.src[p.pos] == ']' {
		p.pos++
		n.End = p.pos
		p.depth--
		return n, nil
	}
	mark := len(p.elems)
	for {
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		p.elems = append(p.elems, v)
		p.skipSpace()
		if p.pos >= len(p.src) {
			return nil, p.errf("unexpected end in array")
		}
		switch p.src[p.pos] {
		case ',':
			p.pos++
			p.skipSpace()
		case ']':
			p.pos++
			n.End = p.pos
			n.Elems = p.takeElems(mark)
			p.depth--
			return n, nil
		default:
			return nil, p.errf("expected comma or end of array")
		}
	}
}

// Get returns the value of key in an object, or nil.
func (n *Node) Get(key string) *Node {
	if n == nil || n.Kind != Object {
		return nil
	}
	for i := range n.Members {
		if n.Members[i].Key == key {
			return n.Members[i].Value
		}
	}
	return nil
}

// Is reports whether n is non-nil and of kind k.
func (n *Node) Is(k Kind) bool { return n != nil && n.Kind == k }

// Raw returns the source bytes of n.
func (n *Node) Raw(src []byte) []byte { return src[n.Start:n.End] }

// Text decodes a string node. ok is false for other kinds.
func (n *Node) Text(src []byte) (s string, ok bool) {
	if !n.Is(String) {
		return "", false
	}
	return decodeString(src[n.Start:n.End], n.Escaped), true
}

// TextBytes decodes a string node into a new slice (nil for other kinds).
// The caller owns the slice.
func (n *Node) TextBytes(src []byte) []byte {
	if !n.Is(String) {
		return nil
	}
	return n.AppendText(nil, src)
}

// TextPrefix decodes about the first max bytes of a string node: the cut is
// made only between escapes, so a long string costs what its start costs.
func (n *Node) TextPrefix(src []byte, max int) string {
	if !n.Is(String) {
		return ""
	}
	q := src[n.Start:n.End]
	if len(q) <= max+2 {
		return decodeString(q, n.Escaped)
	}
	cut := 1
	for cut < len(q)-1 && cut <= max {
		if q[cut] != '\\' {
			cut++
		} else if q[cut+1] == 'u' {
			cut += 6
		} else {
			cut += 2
		}
	}
	if cut >= len(q)-1 {
		return decodeString(q, n.Escaped)
	}
	buf := make([]byte, 0, cut+1)
	buf = append(append(buf, q[:cut]...), '"')
	return string(appendDecoded(nil, buf))
}

// AppendText appends the decoded string to dst (nothing for other kinds).
func (n *Node) AppendText(dst, src []byte) []byte {
	if !n.Is(String) {
		return dst
	}
	q := src[n.Start:n.End]
	if !n.Escaped {
		return append(dst, q[1:len(q)-1]...)
	}
	return appendDecoded(dst, q)
}

// StringIs reports whether n is a string equal to want, without allocating
// for unescaped strings.
func (n *Node) StringIs(src []byte, want string) bool {
	if !n.Is(String) {
		return false
	}
	if !n.Escaped {
		return string(src[n.Start+1:n.End-1]) == want
	}
	s, _ := n.Text(src)
	return s == want
}

// decodeString decodes a validated quoted JSON string. Lone surrogates
// become U+FFFD, as encoding/json does. An escaped string is decoded into
// a buffer of its own that nothing else references, so the string is a
// view of it rather than a second copy, unless the escapes made it much
// shorter than the buffer (text spelt in \u escapes): a string that is
// kept should not hold twice its size.
func decodeString(q []byte, escaped bool) string {
	if !escaped {
		return string(q[1 : len(q)-1])
	}
	b := appendDecoded(nil, q)
	if cap(b) > len(b)+len(b)/4 {
		return string(b)
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// appendDecoded appends the decoded form of a validated quoted string.
func appendDecoded(out, q []byte) []byte { return appendUnescaped(out, q[1:len(q)-1]) }

// appendUnescaped appends the decoded form of body: a validated string's
// content, or a span of it cut between escapes. Decoding never lengthens
// (every escape is at least as long as the UTF-8 it stands for), so out
// grows once by len(body) and is written by index: eight bytes at a time
// are copied and searched for a backslash, and each escape is decoded in
// place. Tool output escapes a newline, tab or quote every few dozen
// bytes, which is where a search call per escape would cost most. (The
// vault's unquoteJSON has the same copy loop, not shared: a call per
// chunk costs more than the loop's own work.)
func appendUnescaped(out, body []byte) []byte {
	n := len(out)
	out = slices.Grow(out, len(body))[:n+len(body)]
	dst := out[n:]
	i, w := 0, 0 // w <= i throughout, so dst has room for what body has left
	for {
		for i+8 <= len(body) {
			x := binary.LittleEndian.Uint64(body[i:])
			binary.LittleEndian.PutUint64(dst[w:], x)
			if m := hasZero(x ^ (ones * '\\')); m != 0 {
				k := bits.TrailingZeros64(m) >> 3
				i, w = i+k, w+k
				goto escape
			}
			i, w = i+8, w+8
		}
		for i < len(body) && body[i] != '\\' {
			dst[w] = body[i]
			i, w = i+1, w+1
		}
		if i >= len(body) {
			return out[:n+w]
		}
	escape:
		if i+1 < len(body) && body[i+1] != 'u' {
			dst[w] = unescaped[body[i+1]]
			i, w = i+2, w+1
			continue
		}
		if i+6 > len(body) {
			// Not a whole escape: only a span cut inside one ends so, and
			// RawOffset never cuts there. Copied, never read past.
			dst[w] = body[i]
			i, w = i+1, w+1
			continue
		}
		r := hex4(body[i+2 : i+6])
		i += 6
		if utf16.IsSurrogate(r) {
			r2 := utf8.RuneError
			if i+6 <= len(body) && body[i] == '\\' && body[i+1] == 'u' {
				r2 = utf16.DecodeRune(r, hex4(body[i+2:i+6]))
			}
			if r = r2; r != utf8.RuneError {
				i += 6
			}
		}
		w += utf8.EncodeRune(dst[w:], r)
	}
}

// unescaped maps the letter of each one-letter escape to the byte it
// stands for: a table lookup, not a switch, as escape-dense tool output
// decodes an escape every few bytes (BenchmarkText).
var unescaped = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// RawOffset returns the offset in the quoted string q (a validated string
// node's raw bytes) at which the first want bytes of its decoded form end,
// and false when want falls inside one escape or surrogate pair, or past
// the end. It lets a caller replace a decoded span by splicing raw bytes.
func RawOffset(q []byte, want int) (int, bool) {
	body := q[1 : len(q)-1]
	got := 0
	for i := 0; ; {
		if got == want {
			return i + 1, true
		}
		if got > want || i >= len(body) {
			return 0, false
		}
		if body[i] != '\\' {
			i++
			got++
			continue
		}
		if body[i+1] != 'u' {
			i += 2
			got++
			continue
		}
		// One \uXXXX (or a surrogate pair) decodes to one rune, exactly
		// as appendDecoded does.
		r := hex4(body[i+2 : i+6])
		i += 6
		if utf16.IsSurrogate(r) {
			if i+6 <= len(body) && body[i] == '\\' && body[i+1] == 'u' {
				if r2 := hex4(body[i+2 : i+6]); utf16.DecodeRune(r, r2) != utf8.RuneError {
					got += utf8.RuneLen(utf16.DecodeRune(r, r2))
					i += 6
					continue
				}
			}
			r = utf8.RuneError
		}
		got += utf8.RuneLen(r)
	}
}

// AppendUnquoted appends the decoded form of raw string content (the bytes
// between a validated string's quotes, or a span of them cut by RawOffset).
func AppendUnquoted(dst, body []byte) []byte { return appendUnescaped(dst, body) }

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r = r<<4 | rune(unhex(c))
	}
	return r
}

// AppendString appends s as a JSON string literal. Unlike encoding/json it
// does not escape <, > and &: receipts and summaries should read as written.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, `\u00`...)
				dst = append(dst, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\u`+strconv.FormatInt(int64(r), 16)...)
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
