package compiler

import "sort"

// edit replaces src[start:end] with repl. at is the start of the JSON value
// the edit changes (start itself, or the string a wrapped body is in).
type edit struct {
	start, end int
	at         int
	repl       []byte
}

// Span gives the edit to splice.Apply.
func (e edit) Span() (start, end int, repl []byte) { return e.start, e.end, e.repl }

// tokenHints returns where the token counter may look for cuts (see
// HintedCounter): in the original, the start of every unit and the bounds
// of what every tool-result slot's receipt would replace; in the output of edits, the same places
// moved by the edits before them (those inside an edit are gone) and the
// bounds of every edit. Both are ascending. edits must be sorted and
// disjoint, as splice.Apply leaves them.
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
