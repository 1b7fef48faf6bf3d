package compiler

import (
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// doc is a parsed request: its units (the messages or items whose chain
// identifies the conversation), its tool-result slots and its history, as
// the format's extractor read them in one walk.
type doc struct {
	src   []byte
	root  *jsonv.Node
	known *knownStrings // the parse's keys of src's long strings; may be nil
	arena *jsonv.Arena  // where the compile's trees are parsed; nil: the heap
	hold  artifact.Hold // keeps src from reuse for readers past Compile (Request.Hold); may be nil
	model string
	units []*jsonv.Node
	slots []slot
	// list is the history (messages or input items), nil if none; list
	// element i is units[offset+i] and infos[i] describes it.
	list   *jsonv.Node
	offset int
	infos  []msgInfo
	// bare: the doc is a rewrite parsed for its structure and rules only,
	// so its history descriptions and slots are not kept (scratch is
	// reused).
	bare    bool
	scratch msgInfo
	keyID   func(artifact.Digest) artifact.Digest // Request.KeyID (keyed.go); nil: content identities
	// noTool: the request may carry no tools of its own making (Gemini's
	// cachedContent), so it is offered no recovery tool.
	noTool bool
}

// slot is one tool result that may be replaced by a receipt.
type slot struct {
	unit  int         // index into doc.units
	value *jsonv.Node // the tool result's JSON value
	// [start, end) is what the receipt replaces: the whole value, or, when
	// the client wrapped the result (inner), the body's raw span inside the
	// string, so the wrapper stays byte for byte around the receipt.
	start, end int
	inner      bool
	text       *text // of the body
	tool       string
	args       string
}

// format knows one provider request shape.
type format interface {
	name() provider.Format
	// parse is the format's one extractor: it fills d.units, d.slots,
	// d.model and the history (d.list, d.offset, d.infos) from d.root in
	// one walk. A non-empty reason means the request is not one this
	// format may rewrite.
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
	{geminiGenerate, geminiFormat{}},
	{geminiStream, geminiFormat{}},
}

// FormatFor reports which request format a request with this method and
// path would be compiled as, and false when it is not a candidate. It is the
// one place that decides what the gateway buffers.
func FormatFor(method, path string) (provider.Format, bool) {
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

// setHistory makes list the doc's history, starting at unit offset.
func (d *doc) setHistory(list *jsonv.Node, offset int) {
	d.list, d.offset = list, offset
	if !d.bare {
		d.infos = make([]msgInfo, len(list.Elems))
	}
}

// info is where the extractor describes history element i.
func (d *doc) info(i int) *msgInfo {
	if d.bare {
		d.scratch = msgInfo{}
		return &d.scratch
	}
	return &d.infos[i]
}

// addResult records a tool result as a slot when its value is text (a
// string, or a list of text parts of partType), with the call it answers
// as private provenance. A string's client wrapper stays inline (see
// hasher.bodyOf); a list of parts whose text is wrapped is left alone, as
// replacing the list would vault the wrapper.
func (d *doc) addResult(h *hasher, unit int, value *jsonv.Node, partType string, call toolCall) {
	if d.bare {
		// A rewrite is checked for structure and rules, which read no slot:
		// hashing its results again would be work for nothing.
		return
	}
	sl := slot{unit: unit, value: value, tool: call.name, args: call.args}
	switch {
	case value.Is(jsonv.String):
		sl.text, sl.start, sl.end = h.bodyOf(value)
		sl.inner = sl.start != value.Start
	case value.Is(jsonv.Array):
		s, ok := textParts(d.src, value, partType)
		if !ok {
			return
		}
		if lo, hi := splitWrapper(s); lo != 0 || hi != len(s) {
			return
		}
		sl.text, sl.start, sl.end = newText(s, value.Raw(d.src)), value.Start, value.End
	default:
		return
	}
	d.slots = append(d.slots, sl)
}

// toolCall is the private provenance of a tool result: the call it answers.
type toolCall struct{ name, args string }

// legacyCallID is the id under which a Chat legacy function_call (which
// has none) is paired with its role "function" result: by name.
func legacyCallID(name string) string { return "\x00fn:" + name }

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

// readUser describes the content of a user message (a string, or a list of
// parts): the person's own text values, the parts that are client session
// context (preamble), and whether anything else of the person's is there
// (an image, a document). result is asked first of every part and reports
// the parts that are tool results (they are neither). It returns whether
// the message carries the person's input.
func (in *msgInfo) readUser(src []byte, content *jsonv.Node, textType string, result func(*jsonv.Node) bool) (person bool) {
	if content.Is(jsonv.String) {
		if preambleText(src, content) {
			in.pinned = true
			return false
		}
		in.userText = textRef{content, textType}
		return true
	}
	if !content.Is(jsonv.Array) {
		return false
	}
	var pre []*jsonv.Node
	for _, p := range content.Elems {
		switch {
		case result(p):
		case p.Get("type").StringIs(src, textType) && preambleText(src, p.Get("text")):
			pre = append(pre, p)
		case p.Get("type").StringIs(src, textType):
			in.userText = textRef{content, textType}
			person = true
		default:
			person = true
		}
	}
	if len(pre) > 0 {
		if !person && len(in.results) == 0 && len(pre) == len(content.Elems) {
			in.pinned = true
		} else {
			in.content, in.preamble = content, pre
		}
	}
	return person
}

func noResult(*jsonv.Node) bool { return false }

// describeChars bounds the text describe keeps of a message, in bytes.
const describeChars = 1024

// textRef is where a message's text is: a string, or the parts of
// partType in a list of parts (others, like images, are skipped). It is
// decoded only when a summary quotes it.
type textRef struct {
	content  *jsonv.Node
	partType string
}

// capText returns the start of a message's text, its parts space
// separated, skipping client session-context parts: only the start is ever
// shown in a summary, so no more than describeChars of it is decoded.
func capText(src []byte, r textRef) string {
	var b strings.Builder
	add := func(n *jsonv.Node) {
		if !n.Is(jsonv.String) || b.Len() >= describeChars {
			return
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		t := n.TextPrefix(src, describeChars)
		b.WriteString(t[:min(len(t), describeChars)])
	}
	switch n := r.content; {
	case n.Is(jsonv.String):
		add(n)
	case n.Is(jsonv.Array):
		for _, p := range n.Elems {
			if b.Len() >= describeChars {
				break
			}
			// partType "": Gemini parts, which have no type.
			typed := p.Get("type").StringIs(src, r.partType) || (r.partType == "" && geminiTextPart(src, p))
			if t := p.Get("text"); typed && !preambleText(src, t) {
				add(t)
			}
		}
	}
	return b.String()
}

// Every format can check its provider's rules on its own and knows its
// history; the checker and compaction rely on both.
var (
	_ ruleFormat = chatFormat{}
	_ ruleFormat = responsesFormat{}
	_ ruleFormat = anthropicFormat{}
)
