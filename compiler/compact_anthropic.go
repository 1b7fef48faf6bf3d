package compiler

import "github.com/tokenterminator/caddy-token-terminator/compiler/jsonv"

func (anthropicFormat) history(d *doc) (*jsonv.Node, int) {
	list := d.root.Get("messages")
	return list, d.units0(list)
}

// describe: a user message starts a turn when it carries the person's own
// input (string content, or any block that is not a tool_result); a user
// message holding only tool results continues the turn.
func (anthropicFormat) describe(d *doc, m *jsonv.Node) msgInfo {
	src := d.src
	var in msgInfo
	content := m.Get("content")
	switch role := m.Get("role"); {
	case role.StringIs(src, "user"):
		if s, ok := content.Text(src); ok {
			in.turnStart, in.user = true, s
			break
		}
		if !content.Is(jsonv.Array) {
			break // no content, or an odd one: nothing to describe
		}
		for _, b := range content.Elems {
			switch {
			case b.Get("type").StringIs(src, anthToolResult):
				id, _ := b.Get("tool_use_id").Text(src)
				in.results = append(in.results, id)
			default:
				in.turnStart = true
				if b.Get("type").StringIs(src, "text") {
					s, _ := b.Get("text").Text(src)
					in.user = joinText(in.user, s)
				}
			}
		}
	case role.StringIs(src, "assistant"):
		in.assistant = true
		if s, ok := content.Text(src); ok {
			in.text = s
			break
		}
		if !content.Is(jsonv.Array) {
			break // no content, or an odd one: nothing to describe
		}
		for _, b := range content.Elems {
			switch {
			case b.Get("type").StringIs(src, "text"):
				s, _ := b.Get("text").Text(src)
				in.text = joinText(in.text, s)
			case b.Get("type").StringIs(src, anthToolUse):
				name, _ := b.Get("name").Text(src)
				id, _ := b.Get("id").Text(src)
				in.tools = append(in.tools, name)
				in.calls = append(in.calls, id)
			}
		}
	}
	return in
}

// rules checks tool pairing on its own: results in the immediately
// following user message, before any other block.
func (anthropicFormat) rules(d *doc) error {
	_, err := anthPairing(d.src, d.root.Get("messages"))
	return err
}

func joinText(a, b string) string {
	if a == "" {
		return b
	}
	return a + " " + b
}
