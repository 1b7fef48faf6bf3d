package compiler

import (
	"bytes"
	"fmt"

	"github.com/tokenterminator/caddy-token-terminator/compiler/jsonv"
)

// verify is the validity check on the final payload: the rewrite must parse,
// keep the original's structure everywhere except the replaced values (each
// now a string), and pass the format's own provider rules. It is also the
// oracle of the tests and fuzzers.
func verify(f format, orig *doc, out []byte, edits []edit) error {
	root, err := jsonv.Parse(out, maxDepthForRequests)
	if err != nil {
		return fmt.Errorf("rewrite does not parse: %w", err)
	}
	replaced := make(map[int]bool, len(edits))
	for _, e := range edits {
		replaced[e.start] = true
	}
	if err := sameExcept(orig.src, orig.root, out, root, replaced); err != nil {
		return err
	}
	nd := &doc{src: out, root: root}
	if reason := f.parse(nd, newHasher(out)); reason != "" {
		return fmt.Errorf("rewrite is %s", reason)
	}
	return f.check(orig, nd)
}

// sameExcept compares two trees: identical kinds, keys in the same order,
// identical scalar bytes; an original value whose start offset is in
// replaced must have become a string.
func sameExcept(as []byte, a *jsonv.Node, bs []byte, b *jsonv.Node, replaced map[int]bool) error {
	if replaced[a.Start] {
		if b.Kind != jsonv.String {
			return fmt.Errorf("replaced value at %d is %s", a.Start, b.Kind)
		}
		return nil
	}
	if a.Kind != b.Kind {
		return fmt.Errorf("kind changed at %d", a.Start)
	}
	switch a.Kind {
	case jsonv.Object:
		if len(a.Members) != len(b.Members) {
			return fmt.Errorf("object at %d changed size", a.Start)
		}
		for i := range a.Members {
			if a.Members[i].Key != b.Members[i].Key {
				return fmt.Errorf("key changed at %d", a.Start)
			}
			if err := sameExcept(as, a.Members[i].Value, bs, b.Members[i].Value, replaced); err != nil {
				return err
			}
		}
	case jsonv.Array:
		if len(a.Elems) != len(b.Elems) {
			return fmt.Errorf("array at %d changed size", a.Start)
		}
		for i := range a.Elems {
			if err := sameExcept(as, a.Elems[i], bs, b.Elems[i], replaced); err != nil {
				return err
			}
		}
	default:
		if !bytes.Equal(a.Raw(as), b.Raw(bs)) {
			return fmt.Errorf("value changed at %d", a.Start)
		}
	}
	return nil
}
