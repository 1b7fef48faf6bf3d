package compiler

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
)

// cacheState is what the compiler remembers of the provider's prompt cache
// for a conversation: the prompt the gateway last forwarded, as rendered
// segments (the tools, then every unit in render order), with when it went
// out and which decisions it carried. It travels opaquely in
// Record.Cache / Lineage.Cache.
type cacheState struct {
	steps   int   // forwarded requests of the conversation, this one included
	at      int64 // unix nanoseconds when it was forwarded
	aligned int   // compaction boundary (turns) of what was forwarded; -1: the original went out
	head    uint64
	segs    []seg
	// receipted holds the first 8 bytes of every artifact digest a
	// forwarded receipt named (not folded turns), sorted.
	receipted []uint64
	// tool: the conversation has been sent the recovery tool, so every
	// later rewrite carries it too (sticky). recovered: the first 8 bytes
	// of every artifact digest the model recovered while answering the
	// forwarded request, sorted. Encoded as an optional trailing part
	// (recovery_tool.go), so states recorded before it read as neither.
	tool      bool
	recovered []uint64
	// bps marks, per segment, a cache_control breakpoint at its end: where
	// a provider that caches only at breakpoints (Anthropic) wrote a cache
	// entry. nil for automatic prefix caching (every prefix is an entry),
	// and for states recorded before it (version 1), read the same way.
	bps []bool
	// older are the cache entries earlier forwarded prompts wrote at their
	// breakpoints that may still be live (a provider that caches only at
	// breakpoints reads any of them, not only the last prompt's): each the
	// fingerprint of the prompt up to the breakpoint, and when it was last
	// written or read. At most maxOlderEntries, the most recent.
	older []entryRef
}

// entryRef is a cache entry at a breakpoint: the fingerprint of the
// rendered prompt up to it (a seg's fp) and its last use.
type entryRef struct {
	fp uint64
	at int64
}

// maxOlderEntries bounds cacheState.older: the entries of the last few
// requests are the ones a new request may still extend.
const maxOlderEntries = 8

// seg is one rendered segment: a fingerprint of the rendered prompt up to
// and including it (so equal fingerprints mean an equal prefix), and the
// rendered byte offset where it ends.
type seg struct {
	fp  uint64
	end int
}

// Encoding versions: 2 adds the breakpoint list after the receipted
// digests; 1 is still read (as a state without breakpoints).
const (
	cacheStateV1 = 1
	cacheStateV2 = 2
)

var errCacheState = errors.New("compiler: bad cache state")

func (s *cacheState) encode() []byte {
	b := make([]byte, 0, 40+len(s.segs)*12+len(s.receipted)*8)
	b = append(b, cacheStateV2)
	b = binary.AppendUvarint(b, uint64(s.steps))
	b = binary.AppendVarint(b, s.at)
	b = binary.AppendVarint(b, int64(s.aligned))
	b = binary.LittleEndian.AppendUint64(b, s.head)
	b = binary.AppendUvarint(b, uint64(len(s.segs)))
	prev := 0
	for _, g := range s.segs {
		b = binary.LittleEndian.AppendUint64(b, g.fp)
		b = binary.AppendUvarint(b, uint64(g.end-prev))
		prev = g.end
	}
	b = binary.AppendUvarint(b, uint64(len(s.receipted)))
	for _, r := range s.receipted {
		b = binary.LittleEndian.AppendUint64(b, r)
	}
	// The breakpoints as ascending segment indexes, delta-coded: a count
	// of 0 and no breakpoint list (automatic caching) read back the same.
	n := 0
	for _, bp := range s.bps {
		if bp {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	last := 0
	for i, bp := range s.bps {
		if bp {
			b = binary.AppendUvarint(b, uint64(i-last))
			last = i
		}
	}
	b = binary.AppendUvarint(b, uint64(len(s.older)))
	for _, e := range s.older {
		b = binary.LittleEndian.AppendUint64(b, e.fp)
		b = binary.AppendVarint(b, e.at)
	}
	return appendRecoveryState(b, s)
}

// decodeCacheState reads a recorded state; a missing or unreadable one is
// nil (the cache is then treated as cold).
func decodeCacheState(b []byte) *cacheState {
	s, err := parseCacheState(b)
	if err != nil {
		return nil
	}
	return s
}

func parseCacheState(b []byte) (*cacheState, error) {
	if len(b) == 0 || (b[0] != cacheStateV1 && b[0] != cacheStateV2) {
		return nil, errCacheState
	}
	version := b[0]
	r := &stateReader{b: b[1:]}
	s := &cacheState{steps: int(r.uv()), at: r.sv(), aligned: int(r.sv()), head: r.u64()}
	n := r.uv()
	if r.bad || n > uint64(len(r.b))/9 {
		return nil, errCacheState
	}
	s.segs = make([]seg, n)
	end := 0
	for i := range s.segs {
		s.segs[i].fp = r.u64()
		end += int(r.uv())
		s.segs[i].end = end
	}
	m := r.uv()
	if r.bad || m > uint64(len(r.b))/8 {
		return nil, errCacheState
	}
	s.receipted = make([]uint64, m)
	for i := range s.receipted {
		s.receipted[i] = r.u64()
	}
	if version >= cacheStateV2 && !r.v2(s) {
		return nil, errCacheState
	}
	r.b = parseRecoveryState(r.b, s)
	if r.bad || len(r.b) != 0 {
		return nil, errCacheState
	}
	return s, nil
}

// v2 reads what version 2 adds to s: its breakpoints and its older
// entries. It reports false on a malformed or out-of-range field.
func (r *stateReader) v2(s *cacheState) bool {
	k := r.uv()
	if r.bad || k > uint64(len(s.segs)) {
		return false
	}
	if k > 0 {
		s.bps = make([]bool, len(s.segs))
		at := 0
		for j := uint64(0); j < k; j++ {
			d := r.uv()
			if r.bad || (j > 0 && d == 0) || d >= uint64(len(s.segs)-at) {
				return false
			}
			at += int(d)
			s.bps[at] = true
		}
	}
	k = r.uv()
	if r.bad || k > maxOlderEntries {
		return false
	}
	for j := uint64(0); j < k; j++ {
		s.older = append(s.older, entryRef{fp: r.u64(), at: r.sv()})
	}
	return true
}

// stateReader reads an encoded cache state's fields in order; a field
// that is truncated or malformed sets bad and reads as zero.
type stateReader struct {
	b   []byte
	bad bool
}

func (r *stateReader) uv() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *stateReader) sv() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *stateReader) u64() uint64 {
	if len(r.b) < 8 {
		r.bad = true
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (s *cacheState) wasReceipted(d artifact.Digest) bool {
	if s == nil {
		return false
	}
	_, ok := slices.BinarySearch(s.receipted, short(d))
	return ok
}

func (s *cacheState) time() time.Time { return time.Unix(0, s.at) }

// short is the first 8 bytes of a digest.
func short(d artifact.Digest) uint64 { return binary.LittleEndian.Uint64(d[:8]) }

// mix folds v into the running fingerprint h (FNV-1a style over 64-bit
// words, finished with a splitmix64 avalanche so near values spread).
func mix(h, v uint64) uint64 {
	h = (h ^ v) * 0x100000001b3
	h ^= h >> 31
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 29
	return h
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// headFingerprint identifies what the provider renders before the units:
// the model and the tools (hardware CRC-32C: the tools of a coding agent
// are tens of KB and resent on every request).
func headFingerprint(d *doc) (fp uint64, size int) {
	fp = mix(0x70b, uint64(crc32.Checksum([]byte(d.model), castagnoli)))
	if t := d.root.Get("tools"); t != nil {
		raw := t.Raw(d.src)
		fp = mix(fp, uint64(crc32.Checksum(raw, castagnoli))<<32|uint64(len(raw)))
		size = len(raw)
	}
	return fp, size
}

// rendered lays out a plan's output as the provider renders it, segment by
// segment: the head (tools), then every unit (system, messages or input
// items) as the plan sends it. edited false renders the original. It needs
// the conversation chain (a unit's identity); without one it returns nil.
//
// marked (nil for automatic prefix caching) holds, for the head and then
// every unit, whether it carries a cache_control breakpoint; rendered
// returns the breakpoint flag of each segment with it (nil when marked is
// nil). A fold's summary carries none; a receipt breakpoint
// (receipt_breakpoint.go) marks its unit.
func (p *plan) rendered(edited bool, marked []bool) ([]seg, []bool) {
	d := p.d
	ids := p.unitIDs()
	if len(ids) != len(d.units) {
		return nil, nil
	}
	head, size := p.head, p.headSize
	delta := make([]int, len(d.units))
	marks := make([]uint64, len(d.units))
	if edited {
		for i, s := range d.slots {
			if p.receipt[i] {
				delta[s.unit] += p.receiptDelta[i]
				v := short(s.text.digest) ^ uint64(p.sameAs[i]+1)
				if p.blocks.on {
					v = mix(v, receiptBlockFingerprint)
				}
				marks[s.unit] = mix(marks[s.unit]+1, v)
			}
		}
	}
	out := make([]seg, 0, len(d.units)+1)
	var bps []bool
	if marked != nil {
		bps = make([]bool, 0, len(d.units)+1)
		bps = append(bps, marked[0])
	}
	fp, end := head, size
	out = append(out, seg{fp, end})
	unit := func(u int) {
		fp = mix(mix(fp, short(ids[u])), marks[u])
		end += unitSize(d.units[u]) + delta[u]
		out = append(out, seg{fp, end})
		if bps != nil {
			bps = append(bps, marked[u+1] || (edited && u == p.markUnit))
		}
	}
	cp := p.compaction
	if !edited || cp == nil || len(cp.folds) == 0 {
		for u := range d.units {
			unit(u)
		}
		return out, bps
	}
	for u := 0; u < cp.offset; u++ {
		unit(u)
	}
	fi := 0
	for _, k := range cp.keep {
		switch {
		case k >= 0:
			unit(cp.offset + k)
		case k == -1:
			// A fold's summary; its size counts every byte that replaces
			// the turn's folded runs, kept session-context copies too.
			f := cp.folds[fi]
			fi++
			fp = mix(mix(fp, 0xf01d), short(f.art.Digest))
			end += f.size
			out = append(out, seg{fp, end})
			if bps != nil {
				bps = append(bps, false)
			}
		default:
			// A kept copy of a folded element's session context: its bytes
			// are in its fold's size; it marks the fingerprint only.
			fp = mix(mix(fp, 0x9ae), short(ids[cp.offset+preambleIndex(k)]))
		}
	}
	return out, bps
}

// breakpointMarks reports, for the head (tools) and then every unit,
// whether it carries a cache_control marker: where a provider that caches
// only at breakpoints writes its cache entries (at message granularity, as
// cost.Render places them); with how many markers the whole request has
// and whether one asks for the 1-hour TTL. It reads the markers as the
// check does (cacheBreakpoints: keys as decoded, so neither a tool result
// quoting "cache_control" nor an escaped key fools it) and never scans the
// body's bytes: a 1 MB body's strings are leaves of the tree.
func breakpointMarks(d *doc) (marked []bool, count int, oneHour bool) {
	marked = make([]bool, len(d.units)+1)
	var all []breakpoint
	cacheBreakpoints(d.src, d.root, nil, &all)
	if len(all) == 0 {
		return marked, 0, false
	}
	for _, b := range all {
		oneHour = oneHour || b.oneHour
	}
	var in []breakpoint
	has := func(n *jsonv.Node) bool {
		in = in[:0]
		cacheBreakpoints(d.src, n, nil, &in)
		return len(in) > 0
	}
	if t := d.root.Get("tools"); t != nil {
		marked[0] = has(t)
	}
	for u, n := range d.units {
		marked[u+1] = has(n)
	}
	return marked, len(all), oneHour
}

func unitSize(n *jsonv.Node) int { return n.End - n.Start }

// cachedPrefix is how many rendered bytes of segs the provider's cache
// holds, given the segments last forwarded: the longest common prefix of
// segments. With breakpoints (prevBP not nil) the provider holds entries
// only where the last forwarded prompt had one, so the prefix ends at the
// last common segment that was a breakpoint.
func cachedPrefix(prev []seg, prevBP []bool, segs []seg) int {
	n := 0
	for i := 0; i < len(prev) && i < len(segs) && prev[i].fp == segs[i].fp; i++ {
		if prevBP == nil || (i < len(prevBP) && prevBP[i]) {
			n = segs[i].end
		}
	}
	return n
}
