package compiler

import (
	"fmt"
	"slices"
	"sort"
)

// edit replaces src[start:end] with repl. at is the start of the JSON value
// the edit changes (start itself, or the string a wrapped body is in).
type edit struct {
	start, end int
	at         int
	repl       []byte
}

// splice returns src with the edits applied. Edits must not overlap. Every
// byte outside an edit is copied unchanged: this is what keeps pass-through
// regions byte-identical (no re-serialization).
func splice(src []byte, edits []edit) ([]byte, error) { return spliceReserve(src, edits, 0) }

// spliceReserve is splice leaving room for extra more bytes, so that one
// insertion into the result (insertInto) costs no second copy of it.
func spliceReserve(src []byte, edits []edit, extra int) ([]byte, error) {
	sort.Slice(edits, func(i, j int) bool { return edits[i].start < edits[j].start })
	size := len(src)
	for i, e := range edits {
		if e.start < 0 || e.end > len(src) || e.start > e.end || (i > 0 && e.start < edits[i-1].end) {
			return nil, fmt.Errorf("compiler: bad edit [%d,%d)", e.start, e.end)
		}
		size += len(e.repl) - (e.end - e.start)
	}
	out := make([]byte, 0, size+extra)
	pos := 0
	for _, e := range edits {
		out = append(out, src[pos:e.start]...)
		out = append(out, e.repl...)
		pos = e.end
	}
	return append(out, src[pos:]...), nil
}

// insertInto inserts e (start == end, within out) into out: in place when
// out's spare capacity holds it (the bytes after e.start move up), else
// into a copy. The caller gives out up.
func insertInto(out []byte, e edit) []byte {
	n := len(out)
	if cap(out)-n < len(e.repl) {
		return slices.Concat(out[:e.start], e.repl, out[e.start:])
	}
	out = out[:n+len(e.repl)]
	copy(out[e.start+len(e.repl):], out[e.start:n])
	copy(out[e.start:], e.repl)
	return out
}

// tokenHints returns where the token counter may look for cuts (see
// HintedCounter): in the original, the start of every unit and the bounds
// of what every tool-result slot's receipt would replace; in the output of edits, the same places
// moved by the edits before them (those inside an edit are gone) and the
// bounds of every edit. Both are ascending. edits must be sorted and
// disjoint, as splice leaves them.
func tokenHints(d *doc, edits []edit) (raw, out []int) {
	raw = make([]int, 0, len(d.units)+2*len(d.slots))
	for _, u := range d.units {
		raw = append(raw, u.Start)
	}
	for _, s := range d.slots {
		raw = append(raw, s.start, s.end)
	}
	sort.Ints(raw)
	out = make([]int, 0, len(raw)+2*len(edits))
	delta, k := 0, 0 // the edits before k end at or before the hint
	for _, h := range raw {
		for ; k < len(edits) && edits[k].end <= h; k++ {
			e := edits[k]
			out = append(out, e.start+delta, e.start+delta+len(e.repl))
			delta += len(e.repl) - (e.end - e.start)
		}
		if k < len(edits) && edits[k].start < h {
			continue // inside edit k
		}
		out = append(out, h+delta)
	}
	for ; k < len(edits); k++ {
		e := edits[k]
		out = append(out, e.start+delta, e.start+delta+len(e.repl))
		delta += len(e.repl) - (e.end - e.start)
	}
	// An edit's end and the next hint can coincide (or an empty edit's two
	// ends): keep them ascending, once each.
	sort.Ints(out)
	return raw, compactInts(out)
}

func compactInts(s []int) []int {
	w := 0
	for i, v := range s {
		if i == 0 || v != s[w-1] {
			s[w] = v
			w++
		}
	}
	return s[:w]
}
