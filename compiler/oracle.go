package compiler

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/compiler/jsonv"
)

// CheckRewrite is the validity check as a test oracle: it reports an error
// unless out is orig itself, or orig with some tool-result slot values of
// the format selected by path replaced by receipts, passing every check the
// compiler runs before forwarding (structure, the format's provider rules).
// It recomputes which values were replaced from the two bodies alone.
func CheckRewrite(path string, orig, out []byte) error {
	if bytes.Equal(orig, out) {
		return nil
	}
	f := formatFor("POST", path)
	if f == nil {
		return fmt.Errorf("not a candidate path, yet the body changed")
	}
	d, reason := parseDoc(f, orig, nil)
	if reason != "" {
		return fmt.Errorf("original is %s, yet the body changed", reason)
	}
	root, err := jsonv.Parse(out, maxDepthForRequests)
	if err != nil {
		return fmt.Errorf("rewrite does not parse: %w", err)
	}
	slotAt := make(map[int]bool, len(d.slots))
	for _, s := range d.slots {
		slotAt[s.value.Start] = true
	}
	var edits []edit
	var walk func(a, b *jsonv.Node)
	walk = func(a, b *jsonv.Node) {
		if b.Kind == jsonv.String && !bytes.Equal(a.Raw(orig), b.Raw(out)) {
			if s, _ := b.Text(out); strings.HasPrefix(s, ReceiptPrefix) {
				edits = append(edits, edit{start: a.Start, end: a.End})
				return
			}
		}
		if a.Kind != b.Kind {
			return
		}
		switch a.Kind {
		case jsonv.Object:
			for i := range a.Members {
				if i < len(b.Members) {
					walk(a.Members[i].Value, b.Members[i].Value)
				}
			}
		case jsonv.Array:
			for i := range a.Elems {
				if i < len(b.Elems) {
					walk(a.Elems[i], b.Elems[i])
				}
			}
		}
	}
	walk(d.root, root)
	if len(edits) == 0 {
		return fmt.Errorf("body changed without any receipt")
	}
	for _, e := range edits {
		if !slotAt[e.start] {
			return fmt.Errorf("receipt at offset %d is not in a tool-result slot", e.start)
		}
	}
	return verify(f, &plan{d: d.doc, edits: edits}, out)
}
