package recovery

import (
	"bytes"
	"slices"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
)

// chatStream stitches OpenAI Chat Completions streams (chat.completion.chunk
// events, then "data: [DONE]"): content chunks of every round go to the
// client, relabelled with the first round's id; tool-call deltas are held to
// the round's end; the last round's finish chunk, usage chunk and [DONE]
// end the stream. Only choice 0 is stitched (tools are not used with n > 1);
// chunks of other choices pass through.
type chatStream struct {
	id []byte // the first round's chunk id (a JSON string)

	// this round
	calls   map[int]*chatCall // by tool_calls index
	order   []int
	text    []byte
	hasText bool
	end     []heldEvent // finish chunk, usage chunk, [DONE]

	// the last complete round
	lastEnd   []heldEvent
	lastCalls []*chatCall // the client's
}

// chatCall is one streamed tool call: its pieces as they came (the chunk
// and the tool_calls element) and the assembled call.
type chatCall struct {
	own      bool
	pieces   []chatPiece
	id, name string
	args     []byte
}

type chatPiece struct {
	chunk, elem []byte
	index       int  // the provider's index
	alone       bool // the chunk's delta held only this element
}

func newChatStream() *chatStream {
	s := &chatStream{}
	s.reset()
	return s
}

func (s *chatStream) reset() {
	s.calls, s.order, s.text, s.hasText, s.end = map[int]*chatCall{}, nil, nil, false, nil
}

var chatDone = []byte("[DONE]")

func (s *chatStream) event(ev response.Event, round int, out func([]byte)) {
	if bytes.Equal(bytes.TrimSpace(ev.Data), chatDone) {
		s.end = append(s.end, hold(ev))
		return
	}
	root := parseEvent(ev)
	if root == nil {
		out(ev.Raw)
		return
	}
	src := ev.Data
	if s.id == nil {
		if id := root.Get("id"); id.Is(jsonv.String) {
			s.id = slices.Clone(id.Raw(src))
		}
	}
	choices := root.Get("choices")
	if choices.Is(jsonv.Array) && len(choices.Elems) == 0 && root.Get("usage").Is(jsonv.Object) {
		s.end = append(s.end, hold(ev)) // the usage chunk
		return
	}
	if !choices.Is(jsonv.Array) || len(choices.Elems) != 1 || !isZero(src, choices.Elems[0].Get("index")) {
		out(s.relabel(ev, root, nil))
		return
	}
	ch := choices.Elems[0]
	delta := ch.Get("delta")
	if c := delta.Get("content"); c.Is(jsonv.String) {
		s.text, s.hasText = c.AppendText(s.text, src), true
	}
	finished := ch.Get("finish_reason") != nil && !ch.Get("finish_reason").Is(jsonv.Null)
	tcs := delta.Get("tool_calls")
	if !tcs.Is(jsonv.Array) || len(tcs.Elems) == 0 {
		if finished {
			s.end = append(s.end, hold(ev))
			return
		}
		out(s.relabel(ev, root, nil))
		return
	}
	for _, e := range tcs.Elems {
		i, ok := intOf(src, e.Get("index"))
		if !ok {
			continue
		}
		c := s.calls[i]
		if c == nil {
			c = &chatCall{}
			s.calls[i] = c
			s.order = append(s.order, i)
		}
		if id, ok := e.Get("id").Text(src); ok && id != "" {
			c.id = id
		}
		if name, ok := e.Get("function").Get("name").Text(src); ok && name != "" {
			c.name += name
			c.own = c.name == ToolName
		}
		c.args = e.Get("function").Get("arguments").AppendText(c.args, src)
		c.pieces = append(c.pieces, chatPiece{chunk: slices.Clone(src), elem: slices.Clone(e.Raw(src)), index: i,
			alone: len(tcs.Elems) == 1 && len(delta.Members) == 1 && !finished})
	}
	// What else the chunk says (text beside the calls, rare) goes on without
	// them; a finish reason on the last call chunk becomes the end.
	rest := spliceOr(src, []edit{{delta.Start, delta.End, objectWithout(src, delta, "tool_calls")}})
	if finished {
		s.end = append(s.end, heldEvent{name: ev.Name, data: rest, raw: sseEvent(ev.Name, rest)})
	} else if c := delta.Get("content"); c.Is(jsonv.String) && c.End-c.Start > 2 {
		restRoot, err := jsonv.Parse(rest, jsonv.MaxDepth)
		if err == nil {
			out(s.relabel(response.Event{Name: ev.Name, Data: rest, Raw: sseEvent(ev.Name, rest)}, restRoot, nil))
		}
	}
}

func isZero(src []byte, n *jsonv.Node) bool { v, ok := intOf(src, n); return ok && v == 0 }

// relabel gives a chunk the first round's id, plus any further edits.
func (s *chatStream) relabel(ev response.Event, root *jsonv.Node, edits []edit) []byte {
	if id := root.Get("id"); id.Is(jsonv.String) && s.id != nil && !bytes.Equal(id.Raw(ev.Data), s.id) {
		edits = append(edits, edit{id.Start, id.End, s.id})
	}
	if len(edits) == 0 {
		return ev.Raw
	}
	return sseEvent(ev.Name, spliceOr(ev.Data, edits))
}

func (s *chatStream) endRound() ([]byte, bool) {
	answer := []byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":`)
	if s.hasText {
		answer = jsonv.AppendString(answer, string(s.text))
	} else {
		answer = append(answer, "null"...)
	}
	if len(s.order) > 0 {
		answer = append(answer, `,"tool_calls":[`...)
		for n, i := range s.order {
			c := s.calls[i]
			if n > 0 {
				answer = append(answer, ',')
			}
			answer = append(answer, `{"id":`...)
			answer = jsonv.AppendString(answer, c.id)
			answer = append(answer, `,"type":"function","function":{"name":`...)
			answer = jsonv.AppendString(answer, c.name)
			answer = append(answer, `,"arguments":`...)
			answer = jsonv.AppendString(answer, string(c.args))
			answer = append(answer, "}}"...)
		}
		answer = append(answer, ']')
	}
	answer = append(answer, "}}]}"...)
	ok := false
	for _, e := range s.end {
		ok = ok || bytes.Equal(bytes.TrimSpace(e.data), chatDone)
	}
	if ok {
		s.lastEnd, s.lastCalls = s.end, nil
		for _, i := range s.order {
			if c := s.calls[i]; !c.own {
				s.lastCalls = append(s.lastCalls, c)
			}
		}
	}
	s.reset()
	return answer, ok
}

func (s *chatStream) finish(u provider.Usage, rewrite bool, out func([]byte)) bool {
	if s.lastEnd == nil {
		return false
	}
	for ci, c := range s.lastCalls {
		for _, p := range c.pieces {
			out(s.releasePiece(p, ci))
		}
	}
	for _, ev := range s.lastEnd {
		root, err := jsonv.Parse(ev.data, jsonv.MaxDepth)
		if err != nil || !root.Is(jsonv.Object) {
			out(ev.raw)
			continue
		}
		var edits []edit
		if rewrite {
			if ch := root.Get("choices"); ch.Is(jsonv.Array) && len(ch.Elems) > 0 {
				if fr := ch.Elems[0].Get("finish_reason"); fr.StringIs(ev.data, "tool_calls") && len(s.lastCalls) == 0 {
					edits = append(edits, edit{fr.Start, fr.End, []byte(`"stop"`)})
				}
			}
			if u.Known {
				edits = append(edits, usageEdits(provider.Chat, ev.data, root.Get("usage"), u)...)
			}
		}
		out(s.relabel(response.Event{Name: ev.name, Data: ev.data, Raw: ev.raw}, root, edits))
	}
	s.lastEnd = nil
	return true
}

// releasePiece re-emits a held piece of a client call as client call ci:
// as it came when nothing changes, else a chunk whose delta holds just it.
func (s *chatStream) releasePiece(p chatPiece, ci int) []byte {
	root, err := jsonv.Parse(p.chunk, jsonv.MaxDepth)
	if err != nil {
		return nil
	}
	ev := response.Event{Data: p.chunk, Raw: sseEvent("", p.chunk)}
	if p.alone && p.index == ci {
		return s.relabel(ev, root, nil)
	}
	elem, err := jsonv.Parse(p.elem, jsonv.MaxDepth)
	if err != nil {
		return nil
	}
	delta := root.Get("choices").Elems[0].Get("delta")
	repl := append([]byte(`{"tool_calls":[`), setInts(p.elem, elem, map[string]int{"index": ci})...)
	repl = append(repl, "]}"...)
	return s.relabel(ev, root, []edit{{delta.Start, delta.End, repl}})
}
