package recovery

import (
	"slices"
	"strconv"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
)

// anthropicStream stitches Anthropic Messages streams: message_start of the
// first round; content blocks of every round, renumbered so the client's
// indexes run on; tool_use blocks held to the round's end; the last
// round's message_delta (stop reason, summed usage) and message_stop.
type anthropicStream struct {
	nextIndex int          // the client's next block index
	open      map[int]bool // client blocks started and not stopped

	// this round
	idx    map[int]int // provider index -> client index, forwarded blocks
	held   map[int]*heldCall
	order  []int // provider indexes in order of appearance
	blocks map[int]*asmBlock
	end    []heldEvent // message_delta, message_stop
	failed bool

	// the last complete round
	lastEnd   []heldEvent
	lastCalls []*heldCall // the client's tool_use blocks
}

// heldCall is a tool call's events, kept back until its round ends.
type heldCall struct {
	own    bool
	events []heldEvent
	// Responses only: the complete item (output_item.done), its
	// output_index, whether it is a reasoning item, and the reasoning
	// items that came just before a call (they go where it goes).
	item      []byte
	oi        int
	reasoning bool
	before    []*heldCall
}

// asmBlock assembles one content block of the answer from its events.
type asmBlock struct {
	start                    []byte // content_block of content_block_start
	text, thinking, input    []byte
	signature                []byte   // JSON string
	citations                [][]byte // citations_delta objects
	hasText, hasThink, hasIn bool
}

func newAnthropicStream() *anthropicStream {
	s := &anthropicStream{open: map[int]bool{}}
	s.reset()
	return s
}

func (s *anthropicStream) reset() {
	s.idx, s.held, s.blocks = map[int]int{}, map[int]*heldCall{}, map[int]*asmBlock{}
	s.order, s.end, s.failed = nil, nil, false
}

func (s *anthropicStream) event(ev response.Event, round int, out func([]byte)) {
	root := parseEvent(ev)
	if root == nil {
		out(ev.Raw) // keep-alives, comments
		return
	}
	src := ev.Data
	typ, _ := root.Get("type").Text(src)
	i, hasIndex := intOf(src, root.Get("index"))
	switch typ {
	case "message_start":
		if round == 0 {
			out(ev.Raw)
		}
	case "message_delta", "message_stop":
		s.end = append(s.end, hold(ev))
	case "error":
		out(ev.Raw)
		s.failed = true
	case "content_block_start", "content_block_delta", "content_block_stop":
		if !hasIndex {
			return // no client can place it; it may be part of our call
		}
		if typ == "content_block_start" {
			cb := root.Get("content_block")
			if !cb.Is(jsonv.Object) {
				return
			}
			s.blocks[i] = &asmBlock{start: slices.Clone(cb.Raw(src))}
			s.order = append(s.order, i)
			if cb.Get("type").StringIs(src, "tool_use") {
				s.held[i] = &heldCall{own: cb.Get("name").StringIs(src, ToolName)}
			} else {
				s.idx[i] = s.nextIndex
				s.open[s.nextIndex] = true
				s.nextIndex++
			}
		}
		if b := s.blocks[i]; b != nil && typ == "content_block_delta" {
			b.add(src, root.Get("delta"))
		}
		if h := s.held[i]; h != nil {
			h.events = append(h.events, hold(ev))
			return
		}
		ci, ok := s.idx[i]
		if !ok {
			return // a block that never started: no client can place it
		}
		out(rewriteEvent(ev, setInts(src, root, map[string]int{"index": ci})))
		if typ == "content_block_stop" {
			delete(s.open, ci)
		}
	default: // ping and event types this version does not know
		out(ev.Raw)
	}
}

// add applies one delta to the block.
func (b *asmBlock) add(src []byte, d *jsonv.Node) {
	switch {
	case d.Get("type").StringIs(src, "text_delta"):
		b.text, b.hasText = d.Get("text").AppendText(b.text, src), true
	case d.Get("type").StringIs(src, "thinking_delta"):
		b.thinking, b.hasThink = d.Get("thinking").AppendText(b.thinking, src), true
	case d.Get("type").StringIs(src, "signature_delta"):
		if sig := d.Get("signature"); sig.Is(jsonv.String) {
			b.signature = slices.Clone(sig.Raw(src))
		}
	case d.Get("type").StringIs(src, "input_json_delta"):
		b.input, b.hasIn = d.Get("partial_json").AppendText(b.input, src), true
	case d.Get("type").StringIs(src, "citations_delta"):
		if c := d.Get("citation"); c.Is(jsonv.Object) {
			b.citations = append(b.citations, slices.Clone(c.Raw(src)))
		}
	}
}

// block returns the assembled block: the start's object with its text,
// thinking, signature or input completed.
func (b *asmBlock) block() []byte {
	obj, err := jsonv.Parse(b.start, jsonv.MaxDepth)
	if err != nil {
		return b.start
	}
	var set []member
	if b.hasText {
		prefix, _ := obj.Get("text").Text(b.start)
		set = append(set, member{"text", jsonv.AppendString(nil, prefix+string(b.text))})
	}
	if b.hasThink {
		prefix, _ := obj.Get("thinking").Text(b.start)
		set = append(set, member{"thinking", jsonv.AppendString(nil, prefix+string(b.thinking))})
	}
	if b.signature != nil {
		set = append(set, member{"signature", b.signature})
	}
	if b.hasIn && len(b.input) > 0 {
		if _, err := jsonv.Parse(b.input, jsonv.MaxDepth); err == nil {
			set = append(set, member{"input", b.input})
		}
	}
	if len(b.citations) > 0 {
		list := []byte{'['}
		if prev := obj.Get("citations"); prev.Is(jsonv.Array) && len(prev.Elems) > 0 {
			list = append(append(list, joinRaw(b.start, prev.Elems)...), ',')
		}
		for i, c := range b.citations {
			if i > 0 {
				list = append(list, ',')
			}
			list = append(list, c...)
		}
		set = append(set, member{"citations", append(list, ']')})
	}
	return spliceOr(b.start, setMembersEdits(obj, set))
}

func (s *anthropicStream) endRound() ([]byte, bool) {
	answer := []byte(`{"role":"assistant","content":[`)
	for n, i := range s.order {
		if n > 0 {
			answer = append(answer, ',')
		}
		answer = append(answer, s.blocks[i].block()...)
	}
	answer = append(answer, "]}"...)
	ok := !s.failed && len(s.end) > 0 && s.end[len(s.end)-1].isType("message_stop")
	if ok {
		s.lastEnd, s.lastCalls = s.end, nil
		for _, i := range s.order {
			if h := s.held[i]; h != nil && !h.own {
				s.lastCalls = append(s.lastCalls, h)
			}
		}
	}
	s.reset()
	return answer, ok
}

func (s *anthropicStream) finish(u provider.Usage, rewrite bool, out func([]byte)) bool {
	// Blocks a cut-short round left open are closed, so the client's
	// message stays well formed.
	open := make([]int, 0, len(s.open))
	for ci := range s.open {
		open = append(open, ci)
	}
	slices.Sort(open)
	for _, ci := range open {
		out(sseEvent("content_block_stop", []byte(`{"type":"content_block_stop","index":`+strconv.Itoa(ci)+`}`)))
	}
	s.open = map[int]bool{}
	if s.lastEnd == nil {
		return false
	}
	for _, h := range s.lastCalls {
		ci := s.nextIndex
		s.nextIndex++
		for _, ev := range h.events {
			root, err := jsonv.Parse(ev.data, jsonv.MaxDepth)
			if err != nil {
				continue
			}
			out(sseEvent(ev.name, setInts(ev.data, root, map[string]int{"index": ci})))
		}
	}
	for _, ev := range s.lastEnd {
		if !rewrite {
			out(ev.raw)
			continue
		}
		data := ev.data
		if ev.isType("message_delta") {
			data = s.finalDelta(data, u)
		}
		out(sseEvent(ev.name, data))
	}
	s.lastEnd = nil
	return true
}

// finalDelta sets the stop reason (no tool call left: end_turn) and the
// usage summed over the rounds.
func (s *anthropicStream) finalDelta(data []byte, u provider.Usage) []byte {
	root, err := jsonv.Parse(data, jsonv.MaxDepth)
	if err != nil {
		return data
	}
	var edits []edit
	if sr := root.Get("delta").Get("stop_reason"); sr.StringIs(data, "tool_use") && len(s.lastCalls) == 0 {
		edits = append(edits, edit{sr.Start, sr.End, []byte(`"end_turn"`)})
	}
	if us := root.Get("usage"); us.Is(jsonv.Object) && u.Known {
		var set []member
		for _, f := range usageFields(provider.Anthropic, u) {
			set = append(set, member{f.path[0], strconv.AppendInt(nil, int64(f.v), 10)})
		}
		edits = append(edits, setMembersEdits(us, set)...)
	}
	return spliceOr(data, edits)
}

// isType reports whether a held event's data is of JSON type t.
func (e heldEvent) isType(t string) bool {
	root, err := jsonv.Parse(e.data, jsonv.MaxDepth)
	return err == nil && root.Get("type").StringIs(e.data, t)
}

// rewriteEvent returns the event with new data, or its raw bytes when the data
// did not change.
func rewriteEvent(ev response.Event, data []byte) []byte {
	if string(data) == string(ev.Data) {
		return ev.Raw
	}
	return sseEvent(ev.Name, data)
}
