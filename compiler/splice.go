package compiler

import (
	"fmt"
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
func splice(src []byte, edits []edit) ([]byte, error) {
	sort.Slice(edits, func(i, j int) bool { return edits[i].start < edits[j].start })
	size := len(src)
	for i, e := range edits {
		if e.start < 0 || e.end > len(src) || e.start > e.end || (i > 0 && e.start < edits[i-1].end) {
			return nil, fmt.Errorf("compiler: bad edit [%d,%d)", e.start, e.end)
		}
		size += len(e.repl) - (e.end - e.start)
	}
	out := make([]byte, 0, size)
	pos := 0
	for _, e := range edits {
		out = append(out, src[pos:e.start]...)
		out = append(out, e.repl...)
		pos = e.end
	}
	return append(out, src[pos:]...), nil
}
