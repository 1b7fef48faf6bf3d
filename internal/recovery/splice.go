package recovery

import (
	"slices"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
)

// edit replaces src[start:end] with repl.
type edit struct {
	start, end int
	repl       []byte
}

// splice applies non-overlapping edits; every byte outside them is copied
// unchanged. (The compiler has its own, unexported; this package edits
// request bodies the same way.)
func splice(src []byte, edits []edit) []byte {
	slices.SortFunc(edits, func(a, b edit) int { return a.start - b.start })
	size := len(src)
	for _, e := range edits {
		size += len(e.repl) - (e.end - e.start)
	}
	out := make([]byte, 0, size)
	pos := 0
	for _, e := range edits {
		out = append(out, src[pos:e.start]...)
		out = append(out, e.repl...)
		pos = e.end
	}
	return append(out, src[pos:]...)
}

// appendElemsEdit inserts elems (already joined with commas) at the end of
// array arr, right after its last element.
func appendElemsEdit(arr *jsonv.Node, elems []byte) edit {
	if len(arr.Elems) == 0 {
		return edit{arr.Start + 1, arr.Start + 1, elems}
	}
	at := arr.Elems[len(arr.Elems)-1].End
	return edit{at, at, append([]byte{','}, elems...)}
}

func appendElems(src []byte, arr *jsonv.Node, elems []byte) []byte {
	return splice(src, []edit{appendElemsEdit(arr, elems)})
}

// insertMember adds member ("key":value) at the end of object obj.
func insertMember(src []byte, obj *jsonv.Node, member []byte) []byte {
	if len(obj.Members) == 0 {
		return splice(src, []edit{{obj.Start + 1, obj.Start + 1, member}})
	}
	at := obj.Members[len(obj.Members)-1].Value.End
	return splice(src, []edit{{at, at, append([]byte{','}, member...)}})
}

// joinRaw joins the source bytes of nodes with commas.
func joinRaw(src []byte, nodes []*jsonv.Node) []byte {
	var out []byte
	for i, n := range nodes {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, n.Raw(src)...)
	}
	return out
}

// member is a key and the JSON bytes of its value.
type member struct {
	key   string
	value []byte
}

// setMembersEdits returns edits that give object obj the members set:
// values of keys present are replaced, absent keys are added at the end.
func setMembersEdits(obj *jsonv.Node, set []member) []edit {
	var edits []edit
	var add []byte
	for _, m := range set {
		if v := obj.Get(m.key); v != nil {
			edits = append(edits, edit{v.Start, v.End, m.value})
			continue
		}
		if len(add) > 0 || len(obj.Members) > 0 {
			add = append(add, ',')
		}
		add = jsonv.AppendString(add, m.key)
		add = append(append(add, ':'), m.value...)
	}
	if len(add) > 0 {
		at := obj.Start + 1
		if n := len(obj.Members); n > 0 {
			at = obj.Members[n-1].Value.End
		}
		edits = append(edits, edit{at, at, add})
	}
	return edits
}
