package compiler

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// geminiFormat is the Gemini API's generateContent and
// streamGenerateContent (Google AI and Vertex AI paths alike): units are
// systemInstruction (when present, as unit 0) and the contents; slots are
// the string values inside functionResponse.response objects of user
// contents. The response is a JSON object, not a string, so a receipt
// replaces one string value inside it and the rest of the object stays
// byte for byte (name, id, every other member).
//
// Never touched: every part that is not a functionResponse (text,
// functionCall, inlineData, fileData, executableCode, and thought parts),
// every thoughtSignature (the API validates the signatures of the current
// turn and they must come back unchanged and in place), systemInstruction,
// tools, toolConfig, generationConfig, safetySettings and cachedContent.
//
// A request naming an explicit cache (cachedContent) is compiled over its
// contents only: the cached content is a separate resource the request
// extends, so everything the rewrite may touch follows the cache. Such a
// request may set no tools, so it is offered no recovery tool.
type geminiFormat struct{}

// geminiName is the format's name (metrics label, ledger, chain seed).
const geminiName = provider.Gemini

func (geminiFormat) name() provider.Format { return geminiName }

// The path suffixes of the Gemini methods this format compiles.
const (
	geminiGenerate = ":generateContent"
	geminiStream   = ":streamGenerateContent"
)

// geminiCall is one functionCall part of a model content, as its responses
// are paired with it: by id when the call has one, else by name in order.
type geminiCall struct {
	name, id, key, args string
	used                bool
}

// parse walks the contents once: slots, the calls they answer, and each
// content's history description. A user content starts a turn when it
// carries the person's input (a text, inlineData or fileData part that is
// not client session context); a user content holding only function
// responses continues the turn.
func (geminiFormat) parse(d *doc, h *hasher) Reason {
	src := d.src
	if !d.root.Is(jsonv.Object) {
		return ReasonUnknownShape
	}
	contents := d.root.Get("contents")
	if !contents.Is(jsonv.Array) {
		return ReasonUnknownShape
	}
	d.model, _ = d.root.Get("model").Text(src) // the model is in the path; a body may name it too
	if cc := d.root.Get("cachedContent"); cc != nil && cc.Kind != jsonv.Null {
		d.noTool = true
	}
	if sys := d.root.Get("systemInstruction"); sys != nil && sys.Kind != jsonv.Null {
		d.units = append(d.units, sys)
	}
	base := len(d.units)
	d.units = append(d.units, contents.Elems...)
	d.setHistory(contents, base)
	var pending []geminiCall // the calls of the latest model content
	for i, c := range contents.Elems {
		if !c.Is(jsonv.Object) {
			return ReasonUnknownShape
		}
		parts := c.Get("parts")
		if parts != nil && !parts.Is(jsonv.Array) {
			return ReasonUnknownShape
		}
		in := d.info(i)
		role := c.Get("role")
		switch {
		case role.StringIs(src, "model"):
			in.assistant = true
			in.assistText = textRef{parts, ""}
			pending = geminiCalls(src, i, parts, in, pending[:0])
		case role == nil, role.StringIs(src, "user"), role.StringIs(src, "function"):
			// A content without a role is the user's (single-turn
			// requests); "function" is the older role of responses.
			if r := d.geminiUser(h, base+i, parts, in, pending); r != "" {
				return r
			}
		}
	}
	return ""
}

// geminiCalls appends the functionCall parts of model content i (parts,
// nil when it has none) to pending and records each on in. A call without
// an id is keyed by its position, so its responses pair by name in order.
func geminiCalls(src []byte, i int, parts *jsonv.Node, in *msgInfo, pending []geminiCall) []geminiCall {
	if parts == nil {
		return pending
	}
	for k, p := range parts.Elems {
		fc := p.Get("functionCall")
		if !fc.Is(jsonv.Object) {
			continue
		}
		name, _ := fc.Get("name").Text(src)
		id, _ := fc.Get("id").Text(src)
		key := id
		if key == "" {
			key = "\x00gm:" + strconv.Itoa(i) + ":" + strconv.Itoa(k)
		}
		args := ""
		if a := fc.Get("args"); a != nil {
			args = string(a.Raw(src))
		}
		pending = append(pending, geminiCall{name: name, id: id, key: key, args: args})
		in.call(name, key)
	}
	return pending
}

// geminiUser describes the user content that is unit (parts, nil when it
// has none): its function responses become slots answering the latest
// model calls (pending), its client-context text parts its preamble (or
// the whole content is pinned when that is all it holds), and it starts a
// turn when any other part carries the person's input.
func (d *doc) geminiUser(h *hasher, unit int, parts *jsonv.Node, in *msgInfo, pending []geminiCall) Reason {
	if parts == nil {
		return ""
	}
	src := d.src
	var pre []*jsonv.Node
	person := false
	for _, p := range parts.Elems {
		if !p.Is(jsonv.Object) {
			return ReasonUnknownShape
		}
		fr := p.Get("functionResponse")
		switch {
		case fr.Is(jsonv.Object):
			call := geminiAnswer(src, pending, fr)
			in.answer(call.key)
			if r := fr.Get("response"); r.Is(jsonv.Object) {
				d.addGeminiResult(h, unit, r, toolCall{name: call.name, args: call.args})
			}
		case p.Get("text").Is(jsonv.String) && p.Get("thought") == nil && preambleText(src, p.Get("text")):
			pre = append(pre, p)
		case p.Get("text").Is(jsonv.String):
			in.userText = textRef{parts, ""}
			person = true
		default:
			person = true
		}
	}
	if len(pre) > 0 {
		if !person && len(in.results) == 0 && len(pre) == len(parts.Elems) {
			in.pinned = true
		} else {
			in.content, in.preamble = parts, pre
		}
	}
	in.turnStart = person && !in.pinned
	return ""
}

// geminiAnswer returns the call a functionResponse answers among the
// latest model content's calls: the one with its id, else the first
// unanswered one of its name. A response that answers none gets a key of
// its own (the rules report it).
func geminiAnswer(src []byte, pending []geminiCall, fr *jsonv.Node) geminiCall {
	name, _ := fr.Get("name").Text(src)
	id, _ := fr.Get("id").Text(src)
	for k := range pending {
		c := &pending[k]
		if c.used || c.name != name || (id != "" && c.id != "" && c.id != id) {
			continue
		}
		c.used = true
		return *c
	}
	return geminiCall{name: name, key: "\x00gm:orphan:" + name + ":" + id}
}

// addGeminiResult records the string values inside a functionResponse's
// response object as slots, in document order: each is replaced on its
// own, so the object keeps every other member byte for byte.
func (d *doc) addGeminiResult(h *hasher, unit int, v *jsonv.Node, call toolCall) {
	switch v.Kind {
	case jsonv.String:
		d.addResult(h, unit, v, "", call)
	case jsonv.Object:
		for _, m := range v.Members {
			d.addGeminiResult(h, unit, m.Value, call)
		}
	case jsonv.Array:
		for _, e := range v.Elems {
			d.addGeminiResult(h, unit, e, call)
		}
	}
}

// geminiTextPart reports whether p is a part whose text a summary may
// quote: a text part that is not the model's thought.
func geminiTextPart(src []byte, p *jsonv.Node) bool {
	return p.Get("text").Is(jsonv.String) && p.Get("thought") == nil && p.Get("thoughtSignature") == nil
}

// check verifies the Gemini rules on a rewrite, compared with the
// original: everything outside contents byte-identical (systemInstruction,
// tools, cachedContent, generationConfig); the same contents with the same
// roles; every part but a user functionResponse byte-identical (text,
// functionCall, thought parts and every thoughtSignature, in place); of a
// functionResponse every member but response byte-identical, and its
// response still an object; the call/response pairing unchanged.
func (geminiFormat) check(orig, out *doc) error {
	if err := sameOutside(orig, out, "contents"); err != nil {
		return fmt.Errorf("gemini: %w", err)
	}
	oc, nc := orig.root.Get("contents"), out.root.Get("contents")
	if !nc.Is(jsonv.Array) || len(oc.Elems) != len(nc.Elems) {
		return fmt.Errorf("gemini: contents changed")
	}
	for i, a := range oc.Elems {
		if err := geminiSameParts(orig.src, a, out.src, nc.Elems[i]); err != nil {
			return fmt.Errorf("gemini: content %d: %w", i, err)
		}
	}
	if po, err := geminiPairing(orig.src, oc); err == nil {
		pn, err := geminiPairing(out.src, nc)
		if err != nil {
			return err
		}
		if po != pn {
			return fmt.Errorf("gemini: call/response pairing changed")
		}
	}
	return nil
}

// geminiSameParts compares one content of the original with the rewrite's.
func geminiSameParts(as []byte, a *jsonv.Node, bs []byte, b *jsonv.Node) error {
	if !a.Is(jsonv.Object) || !b.Is(jsonv.Object) || len(a.Members) != len(b.Members) {
		return fmt.Errorf("content changed shape")
	}
	for k, m := range a.Members {
		n := b.Members[k]
		if m.Key != n.Key {
			return fmt.Errorf("content keys changed")
		}
		if m.Key != "parts" && !bytes.Equal(m.Value.Raw(as), n.Value.Raw(bs)) {
			return fmt.Errorf("%s changed", m.Key)
		}
	}
	pa, pb := a.Get("parts"), b.Get("parts")
	if !pa.Is(jsonv.Array) {
		if pa != nil && (pb == nil || !bytes.Equal(pa.Raw(as), pb.Raw(bs))) {
			return fmt.Errorf("parts changed")
		}
		return nil
	}
	if !pb.Is(jsonv.Array) || len(pa.Elems) != len(pb.Elems) {
		return fmt.Errorf("parts changed")
	}
	model := a.Get("role").StringIs(as, "model")
	for j, x := range pa.Elems {
		y := pb.Elems[j]
		if model || !x.Get("functionResponse").Is(jsonv.Object) {
			if !bytes.Equal(x.Raw(as), y.Raw(bs)) {
				return fmt.Errorf("part %d changed", j)
			}
			continue
		}
		if err := sameMembersBut(as, x, bs, y, "functionResponse"); err != nil {
			return fmt.Errorf("part %d: %w", j, err)
		}
		fx, fy := x.Get("functionResponse"), y.Get("functionResponse")
		if !fy.Is(jsonv.Object) {
			return fmt.Errorf("part %d: functionResponse changed", j)
		}
		if err := sameMembersBut(as, fx, bs, fy, "response"); err != nil {
			return fmt.Errorf("part %d: functionResponse: %w", j, err)
		}
		if rx, ry := fx.Get("response"), fy.Get("response"); rx.Kind != ry.Kind {
			return fmt.Errorf("part %d: functionResponse.response changed kind", j)
		}
	}
	return nil
}

// sameMembersBut reports an error when two objects differ in their keys
// or in the bytes of any member but the named one.
func sameMembersBut(as []byte, a *jsonv.Node, bs []byte, b *jsonv.Node, except string) error {
	if !a.Is(jsonv.Object) || !b.Is(jsonv.Object) || len(a.Members) != len(b.Members) {
		return fmt.Errorf("changed shape")
	}
	for k, m := range a.Members {
		n := b.Members[k]
		if m.Key != n.Key {
			return fmt.Errorf("keys changed")
		}
		if m.Key != except && !bytes.Equal(m.Value.Raw(as), n.Value.Raw(bs)) {
			return fmt.Errorf("%s changed", m.Key)
		}
	}
	return nil
}

// geminiPairing returns the number of paired function calls, or an error
// when a model content's calls are not answered in the content right after
// it (one user content holding exactly one functionResponse per call, by
// id when the call has one, else by name), or a functionResponse answers
// no call of the model content just before it. These are the API's own
// 400s ("the number of function response parts is equal to the number of
// function call parts").
func geminiPairing(src []byte, contents *jsonv.Node) (int, error) {
	var pending []geminiCall
	paired := 0
	for i, c := range contents.Elems {
		parts := c.Get("parts")
		var ps []*jsonv.Node
		if parts.Is(jsonv.Array) {
			ps = parts.Elems
		}
		responses := 0
		for _, p := range ps {
			fr := p.Get("functionResponse")
			if !fr.Is(jsonv.Object) {
				continue
			}
			responses++
			name, _ := fr.Get("name").Text(src)
			id, _ := fr.Get("id").Text(src)
			found := false
			for k := range pending {
				pc := &pending[k]
				if !pc.used && pc.name == name && (id == "" || pc.id == "" || pc.id == id) {
					pc.used, found = true, true
					break
				}
			}
			if !found {
				return 0, fmt.Errorf("gemini: functionResponse without its functionCall in content %d", i)
			}
			paired++
		}
		if len(pending) > 0 && responses != len(pending) {
			return 0, fmt.Errorf("gemini: functionCall without functionResponse before content %d", i)
		}
		pending = pending[:0]
		if c.Get("role").StringIs(src, "model") {
			for _, p := range ps {
				fc := p.Get("functionCall")
				if !fc.Is(jsonv.Object) {
					continue
				}
				name, _ := fc.Get("name").Text(src)
				id, _ := fc.Get("id").Text(src)
				pending = append(pending, geminiCall{name: name, id: id})
			}
		}
	}
	return paired, nil
}

// rules checks on its own the pairing of function calls and responses.
func (geminiFormat) rules(d *doc) error {
	_, err := geminiPairing(d.src, d.root.Get("contents"))
	return err
}

// geminiDoc reports whether d's history is a Gemini contents list.
func (d *doc) geminiDoc() bool {
	return d.root.Is(jsonv.Object) && d.list != nil && d.root.Get("contents") == d.list
}

// foldMessage is the user message a folded turn's summary line becomes, in
// the shape of the request's history: a Gemini content of one text part,
// or a message with a string content.
func foldMessage(d *doc, line string) []byte {
	if d.geminiDoc() {
		msg := append([]byte(`{"role":"user","parts":[{"text":`), jsonv.AppendString(nil, line)...)
		return append(msg, "}]}"...)
	}
	msg := append([]byte(`{"role":"user","content":`), jsonv.AppendString(nil, line)...)
	return append(msg, '}')
}

// pathModel is the model a Gemini path names
// (/v1beta/models/{model}:generateContent, Vertex's
// …/publishers/google/models/{model}:…), "" for other paths.
func pathModel(path string) string {
	i := strings.LastIndex(path, "/models/")
	if i < 0 {
		return ""
	}
	m := path[i+len("/models/"):]
	j := strings.IndexByte(m, ':')
	if j < 0 || strings.IndexByte(m[:j], '/') >= 0 {
		return ""
	}
	return m[:j]
}

var _ ruleFormat = geminiFormat{}
