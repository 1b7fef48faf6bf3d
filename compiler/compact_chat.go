package compiler

import "github.com/tokenterminator/caddy-token-terminator/compiler/jsonv"

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

// anyText returns the text of a string, or the text parts of a list of
// parts of partType (others, like images, are skipped).
func anyText(src []byte, n *jsonv.Node, partType string) string {
	if s, ok := n.Text(src); ok {
		return s
	}
	var out string
	if n.Is(jsonv.Array) {
		for _, p := range n.Elems {
			if p.Get("type").StringIs(src, partType) {
				s, _ := p.Get("text").Text(src)
				if out != "" {
					out += " "
				}
				out += s
			}
		}
	}
	return out
}

// rules checks chat tool pairing on its own.
func (chatFormat) rules(d *doc) error {
	_, err := chatPairing(d)
	return err
}
