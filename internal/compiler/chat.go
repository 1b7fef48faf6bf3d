package compiler

import (
	"fmt"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// chatFormat is OpenAI Chat Completions (and the many providers that speak
// it): units are the messages; slots are the contents of role "tool" and
// legacy role "function" messages.
type chatFormat struct{}

func (chatFormat) name() provider.Format { return provider.Chat }

// parse walks the messages once: slots, the calls they answer, and each
// message's history description. A turn starts at a user message that
// carries the person's input; system and developer messages, and user
// messages that are only client session context, are pinned.
func (chatFormat) parse(d *doc, h *hasher) Reason {
	src := d.src
	if !d.root.Is(jsonv.Object) {
		return ReasonUnknownShape
	}
	msgs := d.root.Get("messages")
	if !msgs.Is(jsonv.Array) {
		return ReasonUnknownShape
	}
	d.model, _ = d.root.Get("model").Text(src)
	d.units = msgs.Elems
	d.setHistory(msgs, 0)
	// Tool-call ids are only unique within one assistant message (some
	// providers reuse "functions.bash:0" every turn), so a result is matched
	// with the most recent call of that id.
	calls := map[string]toolCall{}
	for i, m := range msgs.Elems {
		if !m.Is(jsonv.Object) {
			return ReasonUnknownShape
		}
		in := d.info(i)
		role := m.Get("role")
		switch {
		case role.StringIs(src, "user"):
			in.readUser(src, m.Get("content"), "text", noResult)
			in.turnStart = !in.pinned
		case role.StringIs(src, "system"), role.StringIs(src, "developer"):
			in.pinned = true
		case role.StringIs(src, "assistant"):
			in.assistant = true
			in.assistText = textRef{m.Get("content"), "text"}
			if tcs := m.Get("tool_calls"); tcs.Is(jsonv.Array) {
				for _, tc := range tcs.Elems {
					fn := tc.Get("function")
					name, _ := fn.Get("name").Text(src)
					id, ok := tc.Get("id").Text(src)
					in.call(name, id)
					if ok {
						args, _ := fn.Get("arguments").Text(src)
						calls[id] = toolCall{name, args}
					}
				}
			}
			if fc := m.Get("function_call"); fc.Is(jsonv.Object) {
				name, _ := fc.Get("name").Text(src)
				args, _ := fc.Get("arguments").Text(src)
				calls[legacyCallID(name)] = toolCall{name, args}
				in.call(name, legacyCallID(name))
			}
		case role.StringIs(src, "tool"), role.StringIs(src, "function"):
			call := callFor(calls, src, m.Get("tool_call_id"))
			if m.Get("tool_call_id") == nil {
				if name, ok := m.Get("name").Text(src); ok { // legacy function result
					call = calls[legacyCallID(name)]
					call.name = name
				}
			}
			if role.StringIs(src, "tool") {
				id, _ := m.Get("tool_call_id").Text(src)
				in.answer(id)
			} else {
				name, _ := m.Get("name").Text(src)
				in.answer(legacyCallID(name))
			}
			d.addResult(h, i, m.Get("content"), "text", call)
		}
	}
	return ""
}

// check verifies tool pairing: every assistant tool call is answered by a
// tool message with its id, directly after the call (only tool messages in
// between), and every tool message answers a call. A rewrite of a well-paired original must be well
// paired; an original the rules do not describe is judged by structure only.
func (chatFormat) check(orig, out *doc) error {
	if _, err := chatPairing(orig); err != nil {
		return nil // the original is not well paired; only structure is compared
	}
	_, err := chatPairing(out)
	return err
}

// chatPairing returns the number of paired calls or an error for an
// unanswered call or an orphan result.
func chatPairing(d *doc) (int, error) {
	src := d.src
	open := map[string]int{}
	paired := 0
	for _, m := range d.units {
		role := m.Get("role")
		if len(open) > 0 && !role.StringIs(src, "tool") {
			// Results follow their calls directly: nothing may come between.
			return 0, fmt.Errorf("chat: tool call without result")
		}
		switch {
		case role.StringIs(src, "assistant"):
			if tcs := m.Get("tool_calls"); tcs.Is(jsonv.Array) {
				for _, tc := range tcs.Elems {
					id, _ := tc.Get("id").Text(src)
					open[id]++
				}
			}
		case role.StringIs(src, "tool"):
			id, _ := m.Get("tool_call_id").Text(src)
			if open[id] == 0 {
				return 0, fmt.Errorf("chat: tool result without call")
			}
			open[id]--
			if open[id] == 0 {
				delete(open, id)
			}
			paired++
		}
	}
	return paired, nil
}

// rules checks chat tool pairing on its own.
func (chatFormat) rules(d *doc) error {
	_, err := chatPairing(d)
	return err
}
