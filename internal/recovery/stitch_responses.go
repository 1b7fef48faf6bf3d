package recovery

import (
	"strconv"

	"slices"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
)

// responsesStream stitches OpenAI Responses streams: the first round's
// response.created / in_progress; the output items of every round,
// renumbered so output_index runs on; function-call items held to the
// round's end; sequence_number renumbered across rounds; the last round's
// response.completed with output listing every item the client saw and the
// usage summed; every response object without the gateway's tool in the
// tools it echoes. The final response keeps the last round's id: that is the
// response whose stored state holds the whole exchange, so a client that
// chains with previous_response_id continues from it.
type responsesStream struct {
	seq     int // the client's next sequence_number
	nextOut int // the client's next output_index
	shown   [][]byte

	// this round
	outIdx map[int]int // provider output_index -> client, forwarded items
	held   map[int]*heldCall
	pend   []*heldCall    // reasoning items waiting for the item after them
	items  map[int][]byte // output_item.done items, for the answer
	end    *heldEvent
	failed bool

	// the last complete round
	lastEnd   *heldEvent
	lastCalls []*heldCall

	created *heldEvent // the first round's response.created, for fail
	errSent bool       // an error event reached the client: its stream has its end
}

func newResponsesStream() *responsesStream {
	s := &responsesStream{}
	s.reset()
	return s
}

func (s *responsesStream) reset() {
	s.outIdx, s.held, s.items = map[int]int{}, map[int]*heldCall{}, map[int][]byte{}
	s.pend, s.end, s.failed = nil, nil, false
}

// reseq renumbers an event's sequence_number (and output_index when ci >= 0)
// and leaves the gateway's tool out of the tools a response object echoes.
func (s *responsesStream) reseq(ev response.Event, root *jsonv.Node, ci int) []byte {
	set := map[string]int{"sequence_number": s.seq}
	s.seq++
	if ci >= 0 {
		set["output_index"] = ci
	}
	edits := eventEchoEdits(ev.Data, root, intEdits(root, set, nil))
	return rewriteEvent(ev, spliceOr(ev.Data, edits))
}

func (s *responsesStream) event(ev response.Event, round int, out func([]byte)) {
	root := parseEvent(ev)
	if root == nil {
		out(ev.Raw)
		return
	}
	src := ev.Data
	typ, _ := root.Get("type").Text(src)
	switch typ {
	case "response.created", "response.in_progress", "response.queued":
		if round == 0 {
			if typ == "response.created" && s.created == nil {
				h := hold(ev)
				s.created = &h
			}
			out(s.reseq(ev, root, -1))
		}
		return
	case "response.completed", "response.incomplete", "response.failed":
		s.flushPending(out)
		h := hold(ev)
		s.end = &h
		return
	case "error":
		out(ev.Raw)
		s.failed, s.errSent = true, true
		return
	}
	oi, ok := intOf(src, root.Get("output_index"))
	if !ok {
		out(s.reseq(ev, root, -1))
		return
	}
	item := root.Get("item")
	_, shown := s.outIdx[oi]
	isCall := item.Get("type").StringIs(src, "function_call") || item.Get("type").StringIs(src, "custom_tool_call")
	switch {
	case shown || s.held[oi] != nil:
	case isCall:
		// Reasoning items just before a call belong to it: they go where
		// it goes (the provider refuses a reasoning item whose following
		// item is missing, and a client sends back what it was shown).
		s.held[oi] = &heldCall{oi: oi, own: isOwnCall(src, item), before: s.pend}
		s.pend = nil
	case typ == "response.output_item.added" && item.Get("type").StringIs(src, "reasoning"):
		h := &heldCall{oi: oi, reasoning: true}
		s.held[oi] = h
		s.pend = append(s.pend, h)
	case typ == "response.output_item.added":
		s.flushPending(out)
	}
	done := typ == "response.output_item.done" && item.Is(jsonv.Object)
	if done {
		s.items[oi] = slices.Clone(item.Raw(src))
	}
	if h := s.held[oi]; h != nil {
		h.events = append(h.events, hold(ev))
		if done {
			h.item = s.items[oi]
		}
		return
	}
	if isOwnCall(src, item) {
		return // a stray piece of our call (its item never announced): never to the client
	}
	ci, ok := s.outIdx[oi]
	if !ok {
		ci = s.nextOut
		s.nextOut++
		s.outIdx[oi] = ci
	}
	if done {
		s.shown = append(s.shown, s.items[oi])
	}
	out(s.reseq(ev, root, ci))
}

// flushPending releases the reasoning items held until the item after
// them was known: it is not a call, so the client sees them now.
func (s *responsesStream) flushPending(out func([]byte)) {
	for _, h := range s.pend {
		delete(s.held, h.oi)
		s.outIdx[h.oi] = s.release(h, out)
	}
	s.pend = nil
}

// release writes a held item's events as the client's next output item and
// returns its client output_index.
func (s *responsesStream) release(h *heldCall, out func([]byte)) int {
	ci := s.nextOut
	s.nextOut++
	for _, ev := range h.events {
		root, err := jsonv.Parse(ev.data, jsonv.MaxDepth)
		if err != nil {
			continue
		}
		e := response.Event{Name: ev.name, Data: ev.data, Raw: ev.raw}
		out(s.reseq(e, root, ci))
	}
	if h.item != nil {
		s.shown = append(s.shown, h.item)
	}
	return ci
}

func (s *responsesStream) endRound() ([]byte, bool) {
	idx := make([]int, 0, len(s.items))
	for oi := range s.items {
		idx = append(idx, oi)
	}
	slices.Sort(idx)
	answer := []byte(`{"output":[`)
	for n, oi := range idx {
		if n > 0 {
			answer = append(answer, ',')
		}
		answer = append(answer, s.items[oi]...)
	}
	answer = append(answer, "]}"...)
	ok := !s.failed && s.end != nil
	if ok {
		s.lastEnd, s.lastCalls = s.end, nil
		for _, oi := range idx {
			if h := s.held[oi]; h != nil && !h.own && !h.reasoning && h.item != nil {
				s.lastCalls = append(s.lastCalls, h)
			}
		}
	}
	s.reset()
	return answer, ok
}

func (s *responsesStream) finish(u provider.Usage, rewrite bool, out func([]byte)) bool {
	if s.lastEnd == nil {
		return false
	}
	for _, h := range s.lastCalls {
		for _, r := range h.before {
			s.release(r, out)
		}
		s.release(h, out)
	}
	output := s.shown
	data := s.lastEnd.data
	root, err := jsonv.Parse(data, jsonv.MaxDepth)
	if !rewrite {
		// One round, nothing of ours: the end as sent, renumbered only if
		// held events moved.
		if err == nil {
			ev := response.Event{Name: s.lastEnd.name, Data: data, Raw: s.lastEnd.raw}
			out(s.reseq(ev, root, -1))
		} else {
			out(s.lastEnd.raw)
		}
		s.lastEnd = nil
		return true
	}
	if err != nil {
		out(sseEvent(s.lastEnd.name, data))
		return true
	}
	edits := []edit{}
	if sn := root.Get("sequence_number"); sn.Is(jsonv.Number) {
		edits = append(edits, edit{sn.Start, sn.End, strconv.AppendInt(nil, int64(s.seq), 10)})
		s.seq++
	}
	if resp := root.Get("response"); resp.Is(jsonv.Object) {
		list := []byte{'['}
		for n, it := range output {
			if n > 0 {
				list = append(list, ',')
			}
			list = append(list, it...)
		}
		list = append(list, ']')
		edits = append(edits, setMembersEdits(resp, []member{{"output", list}})...)
		if u.Known {
			edits = append(edits, usageEdits(provider.Responses, data, resp.Get("usage"), u)...)
		}
		edits = echoEdits(data, resp.Get("tools"), edits)
	}
	out(sseEvent(s.lastEnd.name, spliceOr(data, edits)))
	s.lastEnd = nil
	return true
}

// fail ends a stream none of whose rounds completed with the response
// that response.created announced, as response.failed: status failed, an
// error of code server_error (message: err), the output the client was
// shown, the next sequence_number, and the gateway's tool out of the
// echoed tools. A stream that already carried an error event has its end.
func (s *responsesStream) fail(err error, out func([]byte)) bool {
	if s.errSent {
		return true
	}
	if s.created == nil {
		return false
	}
	data := s.created.data
	root, perr := jsonv.Parse(data, jsonv.MaxDepth)
	if perr != nil || !root.Is(jsonv.Object) || !root.Get("response").Is(jsonv.Object) {
		return false
	}
	var edits []edit
	if t := root.Get("type"); t.Is(jsonv.String) {
		edits = append(edits, edit{t.Start, t.End, []byte(`"response.failed"`)})
	}
	if sn := root.Get("sequence_number"); sn.Is(jsonv.Number) {
		edits = append(edits, edit{sn.Start, sn.End, strconv.AppendInt(nil, int64(s.seq), 10)})
		s.seq++
	}
	resp := root.Get("response")
	list := []byte{'['}
	for n, it := range s.shown {
		if n > 0 {
			list = append(list, ',')
		}
		list = append(list, it...)
	}
	list = append(list, ']')
	e := jsonv.AppendString([]byte(`{"code":"server_error","message":`), err.Error())
	edits = append(edits, setMembersEdits(resp, []member{{"status", []byte(`"failed"`)}, {"error", append(e, '}')}, {"output", list}})...)
	edits = echoEdits(data, resp.Get("tools"), edits)
	out(sseEvent("response.failed", spliceOr(data, edits)))
	s.created = nil
	return true
}
