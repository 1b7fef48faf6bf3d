package recovery

import (
	"bytes"
	"fmt"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
)

// geminiSchema is the tool's input schema in the subset the Gemini API's
// functionDeclarations[].parameters accept (an OpenAPI schema: no
// additionalProperties).
const geminiSchema = `{"type":"object","properties":{` +
	`"action":{"type":"string","enum":["artifact_get","artifact_search"]},` +
	`"artifact_id":{"type":"string","description":"the a_… id of a receipt (artifact_get)"},` +
	`"offset":{"type":"integer","minimum":0,"description":"first character to return (artifact_get; default 0)"},` +
	`"limit":{"type":"integer","minimum":1,"description":"characters per page (artifact_get, default 8000) or results (artifact_search, default 10)"},` +
	`"query":{"type":"string","description":"text to find, case-insensitive (artifact_search)"}},` +
	`"required":["action"]}`

// The Gemini definition is one Tool of the request's tools array, holding
// one functionDeclarations entry: appended after the client's tools, it
// leaves their bytes (and the prompt they cache) as they are.
func init() {
	name := string(jsonv.AppendString(nil, ToolName))
	desc := string(jsonv.AppendString(nil, toolDescription))
	definitions[provider.Gemini] = []byte(`{"functionDeclarations":[{"name":` + name + `,"description":` + desc + `,"parameters":` + geminiSchema + `}]}`)
}

// geminiResponses returns the GenerateContentResponse objects of a Gemini
// answer: the object itself, or the elements of the JSON array a
// streamGenerateContent without alt=sse returns.
func geminiResponses(answer []byte) ([]*jsonv.Node, error) {
	root, err := jsonv.Parse(answer, jsonv.MaxDepth)
	if err != nil {
		return nil, fmt.Errorf("%w: answer", ErrShape)
	}
	switch {
	case root.Is(jsonv.Object):
		return []*jsonv.Node{root}, nil
	case root.Is(jsonv.Array):
		for _, e := range root.Elems {
			if !e.Is(jsonv.Object) {
				return nil, fmt.Errorf("%w: answer", ErrShape)
			}
		}
		return root.Elems, nil
	}
	return nil, fmt.Errorf("%w: answer", ErrShape)
}

// geminiParts is the parts list of a response's first candidate, or nil.
func geminiParts(resp *jsonv.Node) *jsonv.Node {
	c := resp.Get("candidates")
	if !c.Is(jsonv.Array) || len(c.Elems) == 0 {
		return nil
	}
	p := c.Elems[0].Get("content").Get("parts")
	if !p.Is(jsonv.Array) {
		return nil
	}
	return p
}

func isOwnGeminiPart(src []byte, p *jsonv.Node) bool {
	return p.Get("functionCall").Get("name").StringIs(src, ToolName)
}

// followUpGemini appends to the request's contents the model's content
// (every part as it came, thought parts and signatures included, but the
// calls of the client's tools) and a user content answering each of our
// calls with a functionResponse whose response is the tool's JSON object.
// A call without an id is named by its place among the answer's calls, as
// the response reader names it.
func followUpGemini(request, answer []byte, calls []Call) ([]byte, error) {
	req, err := jsonv.Parse(request, jsonv.MaxDepth)
	if err != nil || !req.Is(jsonv.Object) || !req.Get("contents").Is(jsonv.Array) {
		return nil, fmt.Errorf("%w: request", ErrShape)
	}
	resps, err := geminiResponses(answer)
	if err != nil {
		return nil, err
	}
	results := make(map[string][]byte, len(calls))
	for _, c := range calls {
		results[c.ID] = c.Result
	}
	var kept []*jsonv.Node
	var answers []byte
	k := 0
	droppedSignature, keptSignature := false, false
	for _, resp := range resps {
		parts := geminiParts(resp)
		if parts == nil {
			continue
		}
		for _, p := range parts.Elems {
			fc := p.Get("functionCall")
			if !fc.Is(jsonv.Object) {
				kept = append(kept, p)
				continue
			}
			idText, _ := fc.Get("id").Text(answer)
			id := response.GeminiCallID(idText, k)
			k++
			if !isOwnGeminiPart(answer, p) {
				droppedSignature = droppedSignature || p.Get("thoughtSignature") != nil
				continue
			}
			keptSignature = keptSignature || p.Get("thoughtSignature") != nil
			kept = append(kept, p)
			r, ok := results[id]
			if !ok || r == nil {
				return nil, fmt.Errorf("recovery: no result for call %q", id)
			}
			if rr, err := jsonv.Parse(r, jsonv.MaxDepth); err != nil || !rr.Is(jsonv.Object) {
				r = append(append([]byte(`{"result":`), jsonv.AppendString(nil, string(r))...), '}')
			}
			if len(answers) > 0 {
				answers = append(answers, ',')
			}
			answers = append(answers, `{"functionResponse":{`...)
			if idn := fc.Get("id"); idn.Is(jsonv.String) {
				answers = append(append(append(answers, `"id":`...), idn.Raw(answer)...), ',')
			}
			answers = append(answers, `"name":`...)
			answers = jsonv.AppendString(answers, ToolName)
			answers = append(append(append(answers, `,"response":`...), r...), "}}"...)
		}
	}
	if len(answers) == 0 {
		return nil, ErrNoOwnCalls
	}
	if droppedSignature && !keptSignature {
		// The step's signature sat on a client call the follow-up leaves
		// out: without it the API refuses the step ("missing
		// thought_signature"), so the loop ends here.
		return nil, fmt.Errorf("%w: the step's thought signature is on a client call", ErrShape)
	}
	out := []byte(`{"role":"model","parts":[`)
	out = append(out, joinRaw(answer, kept)...)
	out = append(out, `]},{"role":"user","parts":[`...)
	out = append(append(out, answers...), "]}"...)
	return appendElems(request, req.Get("contents"), out)
}

// stripGemini removes our calls from every candidate's parts and, when
// usage is Known, sets the usage figures of every usageMetadata to the sum
// over the rounds. Gemini reports finishReason STOP whether or not the
// model called a tool, so it stays.
func stripGemini(answer []byte, usage provider.Usage) ([]byte, error) {
	resps, err := geminiResponses(answer)
	if err != nil {
		return nil, err
	}
	var edits []edit
	for _, resp := range resps {
		edits = geminiStripEdits(answer, resp, usage, edits)
	}
	return spliceShape(answer, edits)
}

// geminiStripEdits appends the edits that take our calls out of one
// GenerateContentResponse and set its usage to u (when Known).
func geminiStripEdits(src []byte, resp *jsonv.Node, u provider.Usage, edits []edit) []edit {
	if cs := resp.Get("candidates"); cs.Is(jsonv.Array) {
		for _, c := range cs.Elems {
			if parts := c.Get("content").Get("parts"); parts.Is(jsonv.Array) {
				edits = filterArray(src, parts, isOwnGeminiPart, edits)
			}
		}
	}
	if u.Known {
		edits = geminiUsageEdits(src, resp.Get("usageMetadata"), u, edits)
	}
	return edits
}

// geminiUsageEdits sets a usageMetadata's figures to u: thoughts are
// billed as output, so the candidates count is the output less this
// answer's thoughts, and the total stays prompt + candidates + thoughts.
func geminiUsageEdits(src []byte, um *jsonv.Node, u provider.Usage, edits []edit) []edit {
	if !um.Is(jsonv.Object) {
		return edits
	}
	thoughts, _ := intOf(src, um.Get("thoughtsTokenCount"))
	toolUse, _ := intOf(src, um.Get("toolUsePromptTokenCount"))
	return intEdits(um, map[string]int{
		"promptTokenCount":        u.Input - toolUse,
		"cachedContentTokenCount": u.CacheRead,
		"candidatesTokenCount":    max(0, u.Output-thoughts),
		"totalTokenCount":         u.Input + u.Output,
	}, edits)
}

// geminiStream stitches Gemini SSE streams (alt=sse: one whole
// GenerateContentResponse per data line). Chunks of text and thoughts go
// to the client as they come; a chunk holding a functionCall part or a
// finishReason is held to the round's end. When the round's calls are
// ours and another round follows, the held chunks are dropped (the model
// is asked again and repeats any client call); the last round's held
// chunks go out without our calls and with the usage summed over the
// rounds.
type geminiStream struct {
	parts    [][]byte    // this round's parts, in order (the answer)
	held     []heldEvent // this round's held chunks
	finished bool        // this round's finishReason was seen
	last     []heldEvent // the held chunks of the last complete round
	lastOK   bool
}

func newGeminiStream() *geminiStream { return &geminiStream{} }

func (s *geminiStream) event(ev response.Event, round int, out func([]byte)) {
	root := parseEvent(ev)
	if root == nil {
		out(ev.Raw)
		return
	}
	hold := s.finished
	if parts := geminiParts(root); parts != nil {
		for _, p := range parts.Elems {
			s.parts = append(s.parts, bytes.Clone(p.Raw(ev.Data)))
			hold = hold || p.Get("functionCall") != nil
		}
	}
	if cs := root.Get("candidates"); cs.Is(jsonv.Array) {
		for _, c := range cs.Elems {
			if fr := c.Get("finishReason"); fr != nil && !fr.Is(jsonv.Null) {
				s.finished, hold = true, true
			}
		}
	}
	if hold {
		s.held = append(s.held, heldEvent{name: ev.Name, data: bytes.Clone(ev.Data), raw: bytes.Clone(ev.Raw)})
		return
	}
	out(ev.Raw)
}

func (s *geminiStream) endRound() ([]byte, bool) {
	answer := []byte(`{"candidates":[{"content":{"role":"model","parts":[`)
	answer = append(answer, bytes.Join(s.parts, []byte{','})...)
	answer = append(answer, `]},"finishReason":"STOP","index":0}]}`...)
	ok := s.finished
	if ok {
		s.last, s.lastOK = s.held, true
	}
	s.parts, s.held, s.finished = nil, nil, false
	return answer, ok
}

func (s *geminiStream) finish(u provider.Usage, rewrite bool, out func([]byte)) bool {
	if !s.lastOK {
		return false
	}
	for _, ev := range s.last {
		if !rewrite {
			out(ev.raw)
			continue
		}
		root, err := jsonv.Parse(ev.data, jsonv.MaxDepth)
		if err != nil || !root.Is(jsonv.Object) {
			out(ev.raw)
			continue
		}
		edits := geminiStripEdits(ev.data, root, u, nil)
		if len(edits) == 0 {
			out(ev.raw)
			continue
		}
		data := spliceOr(ev.data, edits)
		if geminiEmpty(data) {
			continue // only our call: nothing left for the client
		}
		out(sseEvent(ev.name, data))
	}
	s.last, s.lastOK = nil, false
	return true
}

// geminiEmpty reports whether a chunk says nothing once our calls are out:
// no part left, no finishReason and no usage.
func geminiEmpty(data []byte) bool {
	root, err := jsonv.Parse(data, jsonv.MaxDepth)
	if err != nil || !root.Is(jsonv.Object) || root.Get("usageMetadata") != nil {
		return false
	}
	cs := root.Get("candidates")
	if !cs.Is(jsonv.Array) {
		return false
	}
	for _, c := range cs.Elems {
		if fr := c.Get("finishReason"); fr != nil && !fr.Is(jsonv.Null) {
			return false
		}
		if p := c.Get("content").Get("parts"); !p.Is(jsonv.Array) || len(p.Elems) > 0 {
			return false
		}
	}
	return true
}
