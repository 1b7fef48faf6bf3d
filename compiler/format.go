package compiler

import (
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/compiler/jsonv"
)

// doc is a parsed request: its units (the messages or items whose chain
// identifies the conversation) and its tool-result slots.
type doc struct {
	src   []byte
	root  *jsonv.Node
	model string
	units []*jsonv.Node
	slots []slot
}

// slot is one tool result that may be replaced by a receipt.
type slot struct {
	unit  int         // index into doc.units
	value *jsonv.Node // the JSON value the receipt replaces
	text  *text
	tool  string
	args  string
}

// format knows one provider request shape.
type format interface {
	name() string
	// parse fills d.units, d.slots and d.model from d.root. A non-empty
	// reason means the request is not one this format may rewrite.
	parse(d *doc, h *hasher) Reason
	// check verifies the provider's rules on a parsed rewrite, compared with
	// the original. Both documents are of this format.
	check(orig, out *doc) error
}

// formats by the path suffix that selects them.
var formats = []struct {
	suffix string
	f      format
}{
	{"/chat/completions", chatFormat{}},
	{"/responses", responsesFormat{}},
	{"/messages", anthropicFormat{}},
}

// FormatFor reports which request format a request with this method and
// path would be compiled as, and false when it is not a candidate. It is the
// one place that decides what the gateway buffers.
func FormatFor(method, path string) (string, bool) {
	f := formatFor(method, path)
	if f == nil {
		return "", false
	}
	return f.name(), true
}

func formatFor(method, path string) format {
	if method != "POST" {
		return nil
	}
	path = strings.TrimRight(path, "/")
	if strings.Contains(path, "/threads/") {
		return nil // OpenAI Assistants thread messages: not a conversation body
	}
	for _, e := range formats {
		if strings.HasSuffix(path, e.suffix) {
			return e.f
		}
	}
	return nil
}

// addResult records a tool result as a slot when its value is text (a
// string, or a list of text parts of partType), with the call it answers
// as private provenance.
func (d *doc) addResult(h *hasher, unit int, value *jsonv.Node, partType string, call toolCall) {
	if t := contentText(h, d.src, value, partType); t != nil {
		d.slots = append(d.slots, slot{unit: unit, value: value, text: t, tool: call.name, args: call.args})
	}
}

// callFor returns the most recent call with the given id, or an unnamed one
// when the result answers no call in the request.
func callFor(calls map[string]toolCall, src []byte, id *jsonv.Node) toolCall {
	if id, ok := id.Text(src); ok {
		if c, ok := calls[id]; ok {
			return c
		}
	}
	return toolCall{name: "tool"}
}

// textParts reads a list of text parts ({"type":"text","text":"..."} and
// nothing else) as one text. ok is false for any other shape, and for parts
// carrying a cache_control breakpoint: replacing the list would drop it.
func textParts(src []byte, n *jsonv.Node, partType string) (string, bool) {
	if !n.Is(jsonv.Array) || len(n.Elems) == 0 {
		return "", false
	}
	var b strings.Builder
	for _, p := range n.Elems {
		if !p.Is(jsonv.Object) || !p.Get("type").StringIs(src, partType) {
			return "", false
		}
		for _, m := range p.Members {
			if m.Key != "type" && m.Key != "text" {
				return "", false
			}
		}
		s, ok := p.Get("text").Text(src)
		if !ok {
			return "", false
		}
		b.WriteString(s)
	}
	return b.String(), true
}

// Every format can check its provider's rules on its own and knows its
// history; the checker and compaction rely on both.
var (
	_ ruleFormat = chatFormat{}
	_ ruleFormat = responsesFormat{}
	_ ruleFormat = anthropicFormat{}
	_ turnFormat = chatFormat{}
	_ turnFormat = responsesFormat{}
	_ turnFormat = anthropicFormat{}
)
