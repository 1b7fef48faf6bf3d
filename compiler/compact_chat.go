package compiler

import (
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/compiler/jsonv"
)

func (chatFormat) history(d *doc) (*jsonv.Node, int) { return d.root.Get("messages"), 0 }

// describe: a turn starts at a user message; system and developer messages
// are pinned; assistant tool calls open ids that tool messages answer.
func (chatFormat) describe(d *doc, m *jsonv.Node) msgInfo {
	src := d.src
	var in msgInfo
	role := m.Get("role")
	switch {
	case role.StringIs(src, "user"):
		in.turnStart = true
		in.user = anyText(src, m.Get("content"), "text")
	case role.StringIs(src, "system"), role.StringIs(src, "developer"):
		in.pinned = true
	case role.StringIs(src, "assistant"):
		in.assistant = true
		in.text = anyText(src, m.Get("content"), "text")
		if tcs := m.Get("tool_calls"); tcs.Is(jsonv.Array) {
			for _, tc := range tcs.Elems {
				name, _ := tc.Get("function").Get("name").Text(src)
				id, _ := tc.Get("id").Text(src)
				in.tools = append(in.tools, name)
				in.calls = append(in.calls, id)
			}
		}
		if fc := m.Get("function_call"); fc.Is(jsonv.Object) {
			name, _ := fc.Get("name").Text(src)
			in.tools = append(in.tools, name)
			in.calls = append(in.calls, "\x00fn:"+name)
		}
	case role.StringIs(src, "tool"):
		id, _ := m.Get("tool_call_id").Text(src)
		in.results = append(in.results, id)
	case role.StringIs(src, "function"):
		name, _ := m.Get("name").Text(src)
		in.results = append(in.results, "\x00fn:"+name)
	}
	return in
}

// anyText returns the start of the text of a string, or of the text parts
// of a list of parts of partType (others, like images, are skipped). Only
// the start is ever shown in a summary, so reading stops at describeChars.
func anyText(src []byte, n *jsonv.Node, partType string) string {
	var b textStart
	if n.Is(jsonv.String) {
		b.add(src, n)
	} else if n.Is(jsonv.Array) {
		for _, p := range n.Elems {
			if p.Get("type").StringIs(src, partType) {
				b.add(src, p.Get("text"))
			}
		}
	}
	return b.String()
}

// describeChars bounds the text describe keeps of a message, in bytes.
const describeChars = 1024

// textStart collects the start of several texts, space separated, decoding
// no more than describeChars of them.
type textStart struct{ strings.Builder }

func (b *textStart) add(src []byte, n *jsonv.Node) {
	if !n.Is(jsonv.String) || b.Len() >= describeChars {
		return
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	t := n.TextPrefix(src, describeChars)
	b.WriteString(t[:min(len(t), describeChars)])
}

// rules checks chat tool pairing on its own.
func (chatFormat) rules(d *doc) error {
	_, err := chatPairing(d)
	return err
}
