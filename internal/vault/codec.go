package vault

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"slices"
	"sync"

	"github.com/klauspost/compress/s2"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// Values are a version byte followed by varint-prefixed fields: compact,
// allocation-light and stable, so an identical Record writes identical bytes.
const codecV1 = 1

var errCodec = errors.New("vault: corrupt record")

func ArtKey(tenant string, d artifact.Digest) []byte  { return digestKey("a/", tenant, d) }
func MetaKey(tenant string, d artifact.Digest) []byte { return digestKey("m/", tenant, d) }

// digestKey builds prefix + tenant + "/" + hex(d). The digest has a fixed
// length at the end, so any tenant string yields an unambiguous key.
func digestKey(prefix, tenant string, d artifact.Digest) []byte {
	k := make([]byte, 0, len(prefix)+len(tenant)+1+2*len(d))
	k = append(k, prefix...)
	k = append(k, tenant...)
	k = append(k, '/')
	return hex.AppendEncode(k, d[:])
}

// ScopePrefix is "l/<scope key>/": lineage is private to tenant and session.
func ScopePrefix(sc artifact.Scope) []byte {
	h := sha256.Sum256([]byte(sc.Tenant + "\x00" + sc.Session))
	k := make([]byte, 0, 2+32+1+64)
	k = append(k, "l/"...)
	k = hex.AppendEncode(k, h[:16])
	return append(k, '/')
}

// Meta is the small per-artifact record read by eviction and size scans.
type Meta struct {
	Digest    artifact.Digest
	Chars     int
	TextBytes int
	RawBytes  int
	Created   int64 // unix nanoseconds
	LastSeen  int64 // unix nanoseconds
}

func (m *Meta) Size() int64 { return int64(m.TextBytes) + int64(m.RawBytes) }

func (m *Meta) Encode() []byte {
	b := make([]byte, 0, 1+32+4*binary.MaxVarintLen64)
	b = append(b, codecV1)
	b = append(b, m.Digest[:]...)
	b = binary.AppendUvarint(b, uint64(m.Chars))
	b = binary.AppendUvarint(b, uint64(m.TextBytes))
	b = binary.AppendUvarint(b, uint64(m.RawBytes))
	b = binary.AppendVarint(b, m.Created)
	return binary.AppendVarint(b, m.LastSeen)
}

func (m *Meta) Decode(b []byte) error {
	r := reader{b: b}
	if r.byte() != codecV1 {
		return errCodec
	}
	copy(m.Digest[:], r.bytes(32))
	m.Chars = int(r.uvarint())
	m.TextBytes = int(r.uvarint())
	m.RawBytes = int(r.uvarint())
	m.Created = r.varint()
	m.LastSeen = r.varint()
	return r.done()
}

// contentV2 marks artifact content stored as CRC-32C + one s2 block of the
// fields (Text, Raw, Tool, Args). The CRC makes corruption an error rather
// than other content. Written only for an artifact whose Raw is not a JSON
// string that decodes to its Text (see contentV3).
const contentV2 = 0x10

// contentV3 marks content stored as CRC-32C + one s2 block of Raw, Tool and
// Args only: Raw is a JSON string literal and Text is what it decodes to
// (unquoteJSON), so Text is derived on read instead of stored. An artifact's
// text and the JSON value it replaced are near copies, but escapes on every
// line keep s2 from matching one against the other (together they compressed
// to 1.9x one copy), so storing one halves the bytes compressed, written to
// the value log (memory-mapped: it counts in the process's RSS) and synced
// per request. encodeContent writes v3 only after decoding Raw and finding
// Text, and reading uses the same decoder, so what reads back is the
// artifact written.
const contentV3 = 0x11

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeContent returns the stored form of a's content (v3 when Raw decodes
// to Text, else v2), sized exactly: the plain fields and the compressor's
// worst-case output are pooled scratch, so writing an artifact allocates
// only what is kept (about a third of its text), not twice its size.
func EncodeContent(a *artifact.Artifact) []byte {
	pp := encodeScratch.Get().(*[]byte)
	version := byte(contentV2)
	plain, ok := unquoteJSON(*pp, a.Raw)
	if ok && string(plain) == a.Text {
		version = contentV3
	}
	n := 4*binary.MaxVarintLen64 + len(a.Raw) + len(a.Tool) + len(a.Args)
	if version == contentV2 {
		n += len(a.Text)
	}
	plain = slices.Grow(plain[:0], n)
	if version == contentV2 {
		plain = appendString(plain, a.Text)
	}
	plain = appendBytes(plain, a.Raw) // not appendString(string(a.Raw)): that copies it first
	plain = appendString(plain, a.Tool)
	plain = appendString(plain, a.Args)
	zp := encodeScratch.Get().(*[]byte)
	z := s2.Encode(slices.Grow((*zp)[:0], s2.MaxEncodedLen(len(plain)))[:s2.MaxEncodedLen(len(plain))], plain)
	b := make([]byte, 5+len(z))
	b[0] = version
	binary.LittleEndian.PutUint32(b[1:5], crc32.Checksum(plain, castagnoli))
	copy(b[5:], z)
	*pp, *zp = plain[:0], z[:0]
	encodeScratch.Put(pp)
	encodeScratch.Put(zp)
	return b
}

// encodeScratch holds buffers for encodeContent. Artifacts are at most
// max_artifact_chars (2 MB by default), so a pooled buffer stays bounded.
var encodeScratch = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// Content is the plain fields of stored content. In a v3 record text is
// decoded from raw (a fresh buffer); otherwise every field aliases the
// decompressed block.
type Content struct{ Text, Raw, Tool, Args []byte }

// ContentFields decodes stored content (v1, v2 or v3) and checks its CRC.
func ContentFields(b []byte) (Content, error) {
	if len(b) == 0 {
		return Content{}, errCodec
	}
	var r reader
	switch b[0] {
	case codecV1:
		r.b = b[1:]
	case contentV2, contentV3:
		if len(b) < 5 {
			return Content{}, errCodec
		}
		plain, err := s2.Decode(nil, b[5:])
		if err != nil || crc32.Checksum(plain, castagnoli) != binary.LittleEndian.Uint32(b[1:5]) {
			return Content{}, errCodec
		}
		r.b = plain
	default:
		return Content{}, errCodec
	}
	var c Content
	if b[0] != contentV3 {
		c.Text = r.field()
	}
	c.Raw, c.Tool, c.Args = r.field(), r.field(), r.field()
	if err := r.done(); err != nil {
		return Content{}, err
	}
	if b[0] == contentV3 {
		text, ok := unquoteJSON(nil, c.Raw)
		if !ok {
			return Content{}, errCodec
		}
		c.Text = text
	}
	return c, nil
}

// DecodeContent fills a's Text, Raw, Tool and Args from stored content. A
// record that fails its checksum is an error.
func DecodeContent(b []byte, a *artifact.Artifact) error {
	c, err := ContentFields(b)
	if err != nil {
		return err
	}
	a.Text = string(c.Text)
	a.Raw = bytes.Clone(c.Raw)
	a.Tool = string(c.Tool)
	a.Args = string(c.Args)
	return nil
}

// SameContent reports whether stored content b holds exactly a's fields.
func SameContent(b []byte, a *artifact.Artifact) bool {
	c, err := ContentFields(b)
	return err == nil &&
		string(c.Text) == a.Text &&
		bytes.Equal(c.Raw, a.Raw) &&
		string(c.Tool) == a.Tool &&
		string(c.Args) == a.Args
}

// node is a stored lineage record. A v1 node holds the cumulative exposures
// of its request. A v2 node (nodeV2) holds only the exposures that differ
// from those of its base, an ancestor (see lineage.go); Depth 0 and no base
// mean the exposures are complete, as in v1.
type Node struct {
	Length    int
	Parent    artifact.Digest
	HasParent bool
	Time      int64
	Depth     int // recorded ancestors along the lineage (v2)
	Base      artifact.Digest
	HasBase   bool
	// Exposures is cumulative without a base; with one it is the delta,
	// where DeletedExposure marks an artifact the base has and this node
	// does not.
	Exposures map[artifact.Digest]int
	Cache     []byte // the compiler's cache state; optional trailing field
}

// nodeV2 marks a lineage node stored as a delta against its base.
const nodeV2 = 2

// DeletedExposure marks, in a delta, an exposure removed relative to the
// base (counts are never negative otherwise).
const DeletedExposure = -1

func appendOptDigest(b []byte, ok bool, d artifact.Digest) []byte {
	if !ok {
		return append(b, 0)
	}
	b = append(b, 1)
	return append(b, d[:]...)
}

func (n *Node) Encode() []byte {
	keys := make([]artifact.Digest, 0, len(n.Exposures))
	for d := range n.Exposures {
		keys = append(keys, d)
	}
	slices.SortFunc(keys, func(a, b artifact.Digest) int { return bytes.Compare(a[:], b[:]) })
	b := make([]byte, 0, 1+4*binary.MaxVarintLen64+66+len(keys)*(32+binary.MaxVarintLen64))
	b = append(b, nodeV2)
	b = binary.AppendUvarint(b, uint64(n.Length))
	b = appendOptDigest(b, n.HasParent, n.Parent)
	b = binary.AppendVarint(b, n.Time)
	b = binary.AppendUvarint(b, uint64(n.Depth))
	b = appendOptDigest(b, n.HasBase, n.Base)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, d := range keys {
		b = append(b, d[:]...)
		b = binary.AppendVarint(b, int64(n.Exposures[d]))
	}
	if len(n.Cache) > 0 {
		b = binary.AppendUvarint(b, uint64(len(n.Cache)))
		b = append(b, n.Cache...)
	}
	return b
}

func (n *Node) Decode(b []byte) error {
	r := reader{b: b}
	v := r.byte()
	if v != codecV1 && v != nodeV2 {
		return errCodec
	}
	n.Length = int(r.uvarint())
	if n.HasParent = r.byte() == 1; n.HasParent {
		copy(n.Parent[:], r.bytes(32))
	}
	n.Time = r.varint()
	n.Depth, n.HasBase, n.Base = 0, false, artifact.Digest{}
	if v == nodeV2 {
		n.Depth = int(r.uvarint())
		if n.HasBase = r.byte() == 1; n.HasBase {
			copy(n.Base[:], r.bytes(32))
		}
	}
	cnt := r.uvarint()
	if cnt > uint64(len(b))/33 { // each entry takes at least 33 bytes
		return errCodec
	}
	n.Exposures = make(map[artifact.Digest]int, cnt)
	for range cnt {
		var d artifact.Digest
		copy(d[:], r.bytes(32))
		n.Exposures[d] = int(r.varint())
	}
	if len(r.b) > 0 && !r.bad {
		// Written only when non-empty, so an empty field is corrupt.
		if n.Cache = bytes.Clone(r.field()); len(n.Cache) == 0 {
			r.bad = true
		}
	}
	return r.done()
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendBytes is appendString for a byte slice.
func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// reader decodes sequentially and remembers the first error, so decoders
// read straight through and check once at the end.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) byte() byte {
	if len(r.b) < 1 {
		r.bad = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) bytes(n int) []byte {
	if n < 0 || len(r.b) < n {
		r.bad = true
		r.b = nil
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		r.b = nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.bad = true
		r.b = nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) field() []byte {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.bad = true
		r.b = nil
		return nil
	}
	return r.bytes(int(n))
}

func (r *reader) done() error {
	if r.bad || len(r.b) != 0 {
		return errCodec
	}
	return nil
}

// EncodeNode returns the stored form of rec's lineage node (exposures and
// cache state), recorded at unixNano.
func EncodeNode(rec artifact.Record, unixNano int64) []byte {
	n := Node{Length: rec.Length, Parent: rec.Parent, HasParent: rec.HasParent, Time: unixNano, Exposures: rec.Exposures, Cache: rec.Cache}
	return n.Encode()
}

// DecodeNode returns what Ancestor reports of a stored lineage node: its
// cumulative exposures and the compiler's cache state (nil when none).
func DecodeNode(b []byte) (exposures map[artifact.Digest]int, cache []byte, err error) {
	var n Node
	if err := n.Decode(b); err != nil {
		return nil, nil, err
	}
	return n.Exposures, n.Cache, nil
}

// CheckContent reports whether stored content decodes, passes its CRC and
// is the artifact d (NamesStored).
func CheckContent(v []byte, d artifact.Digest) error {
	c, err := ContentFields(v)
	if err != nil {
		return err
	}
	if !NamesStored(d, c.Text, c.Raw) {
		return ErrDigest
	}
	return nil
}
