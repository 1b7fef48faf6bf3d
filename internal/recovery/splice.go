package recovery

import (
	"fmt"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/splice"
)

// edit replaces src[start:end] with repl.
type edit struct {
	start, end int
	repl       []byte
}

// Span gives the edit to splice.Apply.
func (e edit) Span() (start, end int, repl []byte) { return e.start, e.end, e.repl }

// spliceOr is splice.Apply for a rewrite with a fallback: src itself when
// the edits are refused. They come from src's own parse, so only a bug can
// make them refused; the caller then passes src on as it does an event it
// cannot read.
func spliceOr(src []byte, edits []edit) []byte {
	out, err := splice.Apply(src, edits)
	if err != nil {
		return src
	}
	return out
}

// spliceShape is splice.Apply with a refusal reported as ErrShape.
func spliceShape(src []byte, edits []edit) ([]byte, error) {
	out, err := splice.Apply(src, edits)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrShape, err)
	}
	return out, nil
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

func appendElems(src []byte, arr *jsonv.Node, elems []byte) ([]byte, error) {
	return spliceShape(src, []edit{appendElemsEdit(arr, elems)})
}

// insertMember adds member ("key":value) at the end of object obj.
func insertMember(src []byte, obj *jsonv.Node, member []byte) ([]byte, error) {
	if len(obj.Members) == 0 {
		return spliceShape(src, []edit{{obj.Start + 1, obj.Start + 1, member}})
	}
	at := obj.Members[len(obj.Members)-1].Value.End
	return spliceShape(src, []edit{{at, at, append([]byte{','}, member...)}})
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
