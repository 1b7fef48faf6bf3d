package compiler

import (
	"fmt"
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/compiler/jsonv"
)

func (responsesFormat) history(d *doc) (*jsonv.Node, int) {
	list := d.root.Get("input")
	if !list.Is(jsonv.Array) {
		return nil, 0
	}
	return list, d.units0(list)
}

// describe: an item with role user starts a turn; system and developer
// messages and opaque compaction items are pinned (they stay where they
// are); function and custom tool calls open call_ids their outputs answer.
// A reasoning item is part of its turn and leaves with it, together with
// the item it precedes.
func (responsesFormat) describe(d *doc, it *jsonv.Node) msgInfo {
	src := d.src
	var in msgInfo
	typ := it.Get("type")
	role := it.Get("role")
	switch {
	case typ.StringIs(src, respCompaction):
		in.pinned = true
	case role.StringIs(src, "user"):
		in.turnStart = true
		in.user = anyText(src, it.Get("content"), "input_text")
	case role.StringIs(src, "system"), role.StringIs(src, "developer"):
		in.pinned = true
	case role.StringIs(src, "assistant"):
		in.assistant = true
		in.text = anyText(src, it.Get("content"), "output_text")
	case typ.StringIs(src, respReasoning):
		in.assistant = true // model output: earlier results have been read
	default:
		// Every kind of tool call (function, custom, computer, shell,
		// apply_patch, ...) is "<kind>_call" and its answer
		// "<kind>_call_output", paired by call_id.
		t, _ := typ.Text(src)
		id, hasID := it.Get("call_id").Text(src)
		switch {
		case strings.HasSuffix(t, "_call_output") && hasID:
			in.results = append(in.results, id)
		case strings.HasSuffix(t, "_call"):
			in.assistant = true
			name, _ := it.Get("name").Text(src)
			if name == "" {
				name = strings.TrimSuffix(t, "_call")
			}
			in.tools = append(in.tools, name)
			if hasID {
				in.calls = append(in.calls, id)
			}
		}
	}
	return in
}

// rules checks on its own that every output answers an earlier call of its
// call_id and that every reasoning item is followed by an item that is not
// reasoning.
func (responsesFormat) rules(d *doc) error {
	input := d.root.Get("input")
	if !input.Is(jsonv.Array) {
		return nil
	}
	calls := map[string]bool{}
	for i, it := range input.Elems {
		typ := it.Get("type")
		t, _ := typ.Text(d.src)
		id, hasID := it.Get("call_id").Text(d.src)
		switch {
		case strings.HasSuffix(t, "_call_output") && hasID:
			if !calls[id] {
				return fmt.Errorf("responses: output %d answers no call", i)
			}
		case strings.HasSuffix(t, "_call") && hasID:
			calls[id] = true
		case typ.StringIs(d.src, respReasoning):
			if i+1 == len(input.Elems) || input.Elems[i+1].Get("type").StringIs(d.src, respReasoning) {
				return fmt.Errorf("responses: reasoning item %d has no following item", i)
			}
		}
	}
	return nil
}
