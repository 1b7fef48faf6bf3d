package compiler

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// responsesFormat is OpenAI Responses (POST /v1/responses): units are the
// items of input, preceded by previous_response_id and instructions when
// present (they are the context the input extends, so two conversations
// that differ only there are two lineages); slots are the outputs of
// function_call_output and custom_tool_call_output items.
//
// Everything else is opaque and never touched: reasoning items (their
// encrypted_content must be echoed byte for byte), compaction items, item
// ids, and every field outside input. With previous_response_id the earlier
// history lives at the provider; only what is in input is rewritten.
type responsesFormat struct{}

func (responsesFormat) name() provider.Format { return provider.Responses }

// Item types of the Responses input this format reads.
const (
	respFunctionCall       = "function_call"
	respFunctionCallOutput = "function_call_output"
	respCustomCall         = "custom_tool_call"
	respCustomCallOutput   = "custom_tool_call_output"
	respReasoning          = "reasoning"
	respCompaction         = "compaction"
)

// parse walks the input items once: slots, the calls they answer, and each
// item's history description. An item with role user that carries the
// person's input starts a turn; system and developer messages, opaque
// compaction items and user messages that are only client session context
// (Codex's <environment_context>, AGENTS.md instructions) are pinned (they
// stay where they are). Every kind of tool call (function, custom,
// computer, shell, apply_patch, ...) is "<kind>_call" and its answer
// "<kind>_call_output", paired by call_id. A reasoning item is part of its
// turn and leaves with it, together with the item it precedes.
func (responsesFormat) parse(d *doc, h *hasher) Reason {
	src := d.src
	if !d.root.Is(jsonv.Object) {
		return ReasonUnknownShape
	}
	input := d.root.Get("input")
	switch {
	case input.Is(jsonv.String):
		// A plain prompt: nothing to compile.
		d.model, _ = d.root.Get("model").Text(src)
		return ""
	case !input.Is(jsonv.Array):
		return ReasonUnknownShape
	}
	d.model, _ = d.root.Get("model").Text(src)
	for _, k := range []string{"previous_response_id", "instructions"} {
		if n := d.root.Get(k); n != nil && n.Kind != jsonv.Null {
			d.units = append(d.units, n)
		}
	}
	base := len(d.units)
	d.units = append(d.units, input.Elems...)
	d.setHistory(input, base)
	// call_ids are unique in the Responses API, but a client may reuse one;
	// like chat, an output is matched with the most recent call of its id.
	calls := map[string]toolCall{}
	for i, it := range input.Elems {
		if !it.Is(jsonv.Object) {
			return ReasonUnknownShape
		}
		in := d.info(i)
		typ := it.Get("type")
		switch {
		case typ.StringIs(src, respFunctionCall):
			if id, ok := it.Get("call_id").Text(src); ok {
				name, _ := it.Get("name").Text(src)
				args, _ := it.Get("arguments").Text(src)
				calls[id] = toolCall{name, args}
			}
		case typ.StringIs(src, respCustomCall):
			if id, ok := it.Get("call_id").Text(src); ok {
				name, _ := it.Get("name").Text(src)
				args, _ := it.Get("input").Text(src)
				calls[id] = toolCall{name, args}
			}
		case typ.StringIs(src, respFunctionCallOutput), typ.StringIs(src, respCustomCallOutput):
			d.addResult(h, base+i, it.Get("output"), "input_text", callFor(calls, src, it.Get("call_id")))
		}
		describeResponsesItem(in, src, it, typ)
	}
	return ""
}

// describeResponsesItem describes input item it (of type typ) in in: its
// role or kind, the text a summary quotes, the calls it makes or answers.
func describeResponsesItem(in *msgInfo, src []byte, it, typ *jsonv.Node) {
	role := it.Get("role")
	switch {
	case typ.StringIs(src, respCompaction):
		in.pinned = true
	case role.StringIs(src, "user"):
		in.readUser(src, it.Get("content"), "input_text", noResult)
		in.turnStart = !in.pinned
	case role.StringIs(src, "system"), role.StringIs(src, "developer"):
		in.pinned = true
	case role.StringIs(src, "assistant"):
		in.assistant = true
		in.assistText = textRef{it.Get("content"), "output_text"}
	case typ.StringIs(src, respReasoning):
		in.assistant = true // model output: earlier results have been read
	default:
		t, _ := typ.Text(src)
		id, hasID := it.Get("call_id").Text(src)
		switch {
		case strings.HasSuffix(t, "_call_output") && hasID:
			in.answer(id)
		case strings.HasSuffix(t, "_call"):
			in.assistant = true
			name, _ := it.Get("name").Text(src)
			if name == "" {
				name = strings.TrimSuffix(t, "_call")
			}
			if hasID {
				in.call(name, id)
			} else {
				in.tools = append(in.tools, name) // a call no output can answer
			}
		}
	}
}

// check verifies the Responses rules on a rewrite: the sequence of calls and
// outputs (type and call_id, hence their pairing) is unchanged; reasoning
// and compaction items are byte-identical; every reasoning item is still
// followed by the same item; nothing outside input changed.
func (responsesFormat) check(orig, out *doc) error {
	oi, ni := orig.root.Get("input"), out.root.Get("input")
	if !oi.Is(jsonv.Array) {
		// input a string: no slot can exist, so nothing may have changed.
		if !bytes.Equal(orig.src, out.src) {
			return fmt.Errorf("responses: body changed without input items")
		}
		return nil
	}
	if !ni.Is(jsonv.Array) || len(oi.Elems) != len(ni.Elems) {
		return fmt.Errorf("responses: input items changed")
	}
	if err := sameOutside(orig, out, "input"); err != nil {
		return fmt.Errorf("responses: %w", err)
	}
	if !samePairs(orig.src, oi, out.src, ni) {
		return fmt.Errorf("responses: call/output pairing changed")
	}
	for i, a := range oi.Elems {
		b := ni.Elems[i]
		typ := a.Get("type")
		if !typ.StringIs(orig.src, respReasoning) && !typ.StringIs(orig.src, respCompaction) {
			continue
		}
		if !bytes.Equal(a.Raw(orig.src), b.Raw(out.src)) {
			return fmt.Errorf("responses: opaque item %d changed", i)
		}
		if typ.StringIs(orig.src, respReasoning) && i+1 < len(oi.Elems) {
			if !sameItemKey(orig.src, oi.Elems[i+1], out.src, ni.Elems[i+1]) {
				return fmt.Errorf("responses: reasoning item %d lost its following item", i)
			}
		}
	}
	return nil
}

// samePairs reports whether two input lists have the same call/output
// structure: the type and call_id of every call and output item, in order
// (which output answers which call follows from that sequence). It
// compares the items in place: the check runs on every rewrite, and
// rendering the sequence as text was most of a Responses check's work.
func samePairs(as []byte, a *jsonv.Node, bs []byte, b *jsonv.Node) bool {
	i, j := 0, 0
	for {
		i, j = nextPair(as, a.Elems, i), nextPair(bs, b.Elems, j)
		if i == len(a.Elems) || j == len(b.Elems) {
			return i == len(a.Elems) && j == len(b.Elems)
		}
		x, y := a.Elems[i], b.Elems[j]
		if !sameText(as, x.Get("type"), bs, y.Get("type")) || !sameText(as, x.Get("call_id"), bs, y.Get("call_id")) {
			return false
		}
		i, j = i+1, j+1
	}
}

// nextPair returns the index of the first call or output item of items
// at or after i, or len(items).
func nextPair(src []byte, items []*jsonv.Node, i int) int {
	for ; i < len(items); i++ {
		switch t := items[i].Get("type"); {
		case t.StringIs(src, respFunctionCall), t.StringIs(src, respCustomCall),
			t.StringIs(src, respFunctionCallOutput), t.StringIs(src, respCustomCallOutput):
			return i
		}
	}
	return i
}

// sameItemKey reports whether two items have the same type, id, call_id
// and role.
func sameItemKey(as []byte, a *jsonv.Node, bs []byte, b *jsonv.Node) bool {
	for _, k := range [...]string{"type", "id", "call_id", "role"} {
		if !sameText(as, a.Get(k), bs, b.Get(k)) {
			return false
		}
	}
	return true
}

// sameText reports whether two nodes decode to the same text, a node that
// is absent or not a string counting as "". Strings without escapes are
// compared as their bytes, with no copy.
func sameText(as []byte, a *jsonv.Node, bs []byte, b *jsonv.Node) bool {
	if a.Is(jsonv.String) && b.Is(jsonv.String) && !a.Escaped && !b.Escaped {
		return bytes.Equal(a.Raw(as), b.Raw(bs))
	}
	x, _ := a.Text(as)
	y, _ := b.Text(bs)
	return x == y
}

// sameOutside reports an error when any top-level member other than the
// named ones differs in bytes between the two documents.
func sameOutside(orig, out *doc, keep ...string) error {
	if len(orig.root.Members) != len(out.root.Members) {
		return fmt.Errorf("top-level members changed")
	}
outer:
	for i, m := range orig.root.Members {
		n := out.root.Members[i]
		if m.Key != n.Key {
			return fmt.Errorf("top-level key %d changed", i)
		}
		for _, k := range keep {
			if m.Key == k {
				continue outer
			}
		}
		if !bytes.Equal(m.Value.Raw(orig.src), n.Value.Raw(out.src)) {
			return fmt.Errorf("%s changed", m.Key)
		}
	}
	return nil
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
