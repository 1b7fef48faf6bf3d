// Package splice rewrites a byte buffer by edits that each replace one
// range of it, copying every byte outside them unchanged. It is how the
// request compiler and the recovery loop change a JSON body without
// re-serializing it: what no edit covers stays byte-identical.
package splice

import (
	"cmp"
	"fmt"
	"slices"
)

// Edit is what Apply needs of an edit: it replaces src[start:end] with
// repl. Callers keep their own edit types (with what else they track) and
// give them this method.
type Edit interface {
	Span() (start, end int, repl []byte)
}

// Apply returns src with edits applied; see Reserve.
func Apply[E Edit](src []byte, edits []E) ([]byte, error) { return Reserve(src, edits, 0) }

// Reserve returns src with edits applied, in a new buffer with room for
// extra more bytes (so that one later Insert costs no second copy). It
// sorts edits by start, in place (ties keep the order the sort leaves, the
// same for the same input). It refuses, with an error and no output, an
// edit that is out of src's range, ends before it starts, or overlaps
// another: the caller then keeps src.
func Reserve[E Edit](src []byte, edits []E, extra int) ([]byte, error) {
	slices.SortFunc(edits, func(a, b E) int {
		as, _, _ := a.Span()
		bs, _, _ := b.Span()
		return cmp.Compare(as, bs)
	})
	size, prev := len(src), 0
	for _, e := range edits {
		start, end, repl := e.Span()
		if start < prev || end > len(src) || start > end {
			return nil, fmt.Errorf("splice: bad edit [%d,%d) of %d bytes", start, end, len(src))
		}
		prev = end
		size += len(repl) - (end - start)
	}
	if extra < 0 {
		extra = 0
	}
	out := make([]byte, 0, size+extra)
	pos := 0
	for _, e := range edits {
		start, end, repl := e.Span()
		out = append(out, src[pos:start]...)
		out = append(out, repl...)
		pos = end
	}
	return append(out, src[pos:]...), nil
}

// Insert inserts repl at offset at of out (0 <= at <= len(out)): in place
// when out's spare capacity holds it (the bytes after at move up), else
// into a copy. The caller gives out up. An offset outside out is refused.
func Insert(out []byte, at int, repl []byte) ([]byte, error) {
	n := len(out)
	if at < 0 || at > n {
		return nil, fmt.Errorf("splice: insertion at %d of %d bytes", at, n)
	}
	if cap(out)-n < len(repl) {
		return slices.Concat(out[:at], repl, out[at:]), nil
	}
	out = out[:n+len(repl)]
	copy(out[at+len(repl):], out[at:n])
	copy(out[at:], repl)
	return out, nil
}
