package recovery

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
)

// ErrIncomplete means a round's stream ended before its final event (cut
// short, or an error event the client has already been sent).
var ErrIncomplete = errors.New("recovery: the provider's stream ended early")

// Stitcher turns the SSE streams of every round of the recovery loop into
// one client stream. Events the client should see (text, reasoning,
// thinking) are written to the client as they arrive; events of tool calls
// are held until the round ends, then our calls are dropped and the
// client's released (or dropped too, when the model will be asked again
// and will repeat them). The end of each round's stream is held until it
// is known whether another round follows. Across rounds the client sees
// one message: indexes continue, the start events of later rounds are
// dropped, and the final event carries the usage summed over all rounds.
//
// Use: Write each round's provider stream into it, then EndRound. While a
// Round says Continue, run its calls, send the FollowUp and stream that
// answer in; when anything fails, Close finishes the client stream from
// what it has.
type Stitcher struct {
	client    io.Writer
	flush     func()
	cfg       Config
	maxRounds int
	format    provider.Format

	f      streamFormat
	events response.Events
	reader *response.Reader
	rounds int // rounds ended

	usage    provider.Usage // summed over the rounds so far
	ownSeen  bool           // some round called our tool
	wrote    bool
	werr     error
	done     bool // the client stream is finished (or cannot be)
	sawEvent bool // an event was complete: the answer is a stream
	oversz   bool
}

// streamFormat is one format's stitching.
type streamFormat interface {
	// event handles one event of the current round: forward (via out),
	// hold or drop.
	event(ev response.Event, round int, out func([]byte))
	// endRound closes the round and returns its answer as a JSON body; ok
	// is false when its final event was not seen. A complete round's end
	// and client calls replace those of the one before (whose client calls
	// the model will repeat, having been asked again).
	endRound() (answer []byte, ok bool)
	// finish writes the end of the stream from the last complete round;
	// false when no round completed. With rewrite false (one round that
	// called nothing of ours) the end goes out as the provider sent it;
	// otherwise it carries usage u and a stop reason without our calls.
	finish(u provider.Usage, rewrite bool, out func([]byte)) bool
}

// Round is what one streamed round produced.
type Round struct {
	Calls  []Call         // our tool's calls, to Run
	Answer []byte         // the round's answer assembled as a JSON body, for FollowUp
	Usage  provider.Usage // this round's usage
	// Continue says the stitcher holds the end of the client stream: run
	// Calls, then stream the FollowUp's answer in (or Close).
	Continue bool
}

// NewStitcher returns a Stitcher writing to client, for SSE answers of
// format (Anthropic Messages, OpenAI Responses or OpenAI Chat). client is
// flushed after every write when it has a Flush method (http.Flusher).
// cfg.MaxRounds bounds the follow-up rounds.
func NewStitcher(format provider.Format, client io.Writer, cfg Config) (*Stitcher, error) {
	cfg = cfg.WithDefaults()
	s := &Stitcher{client: client, cfg: cfg, maxRounds: cfg.MaxRounds, format: format}
	switch format {
	case provider.Anthropic:
		s.f = newAnthropicStream()
	case provider.Responses:
		s.f = newResponsesStream()
	case provider.Chat:
		s.f = newChatStream()
	case provider.Gemini:
		s.f = newGeminiStream()
	default:
		return nil, fmt.Errorf("%w: no stream stitching for %q", ErrShape, format)
	}
	if fl, ok := client.(interface{ Flush() }); ok {
		s.flush = fl.Flush
	}
	s.events.OnEvent = func(ev response.Event) {
		s.sawEvent = true
		s.f.event(ev, s.rounds, s.out)
	}
	s.events.OnOversize = func() { s.oversz = true }
	s.reader = s.newReader()
	return s, nil
}

func (s *Stitcher) newReader() *response.Reader {
	return response.NewReader(s.format, response.Options{Stream: true, Keep: []string{ToolName}})
}

// Started reports whether any byte reached the client: until then a failed
// loop can still fall back to forwarding the original answer.
func (s *Stitcher) Started() bool { return s.wrote }

// Write takes the next bytes of the current round's provider stream. It
// fails only when the client cannot be written to.
func (s *Stitcher) Write(p []byte) (int, error) {
	if s.werr != nil {
		return 0, s.werr
	}
	s.reader.Write(p)
	s.events.Write(p)
	if s.wrote && s.flush != nil {
		s.flush()
	}
	if s.werr != nil {
		return 0, s.werr
	}
	return len(p), nil
}

func (s *Stitcher) out(b []byte) {
	if s.werr != nil || len(b) == 0 {
		return
	}
	s.wrote = true
	_, s.werr = s.client.Write(b)
}

// EndRound ends the current round's stream. Unless the Round says
// Continue, the client stream is finished when it returns. An error means
// the round could not be read whole; Close then finishes the client stream
// from the last complete round.
func (s *Stitcher) EndRound() (Round, error) {
	if s.done {
		return Round{}, errors.New("recovery: the stream is finished")
	}
	// An event cut off by the end of the stream is dropped, not forwarded
	// half (the SSE spec discards it too). But a first answer without a
	// single complete event is no stream at all (a JSON error body): it
	// goes to the client as it came.
	if s.rounds == 0 && !s.sawEvent {
		s.events.Flush()
	} else {
		s.events.Reset()
	}
	answer, ok := s.f.endRound()
	r := Round{Calls: OwnCalls(s.reader.ToolCalls()), Answer: answer, Usage: s.reader.Usage()}
	s.usage = s.usage.Add(r.Usage)
	s.ownSeen = s.ownSeen || len(r.Calls) > 0
	s.rounds++
	s.reader = s.newReader()
	if !ok || s.oversz {
		return r, ErrIncomplete
	}
	if len(r.Calls) > 0 && s.rounds <= s.maxRounds {
		r.Continue = true
		return r, s.werr
	}
	return r, s.Close()
}

// Close finishes the client stream from the last complete round: open
// blocks closed, that round's client calls released, our calls left out,
// the stop reason consistent and the usage summed. It is a no-op once the
// stream is finished.
func (s *Stitcher) Close() error {
	if s.done {
		return s.werr
	}
	s.done = true
	if !s.f.finish(s.usage, s.rounds > 1 || s.ownSeen, s.out) {
		if s.werr == nil {
			return ErrIncomplete
		}
	}
	if s.flush != nil && s.wrote {
		s.flush()
	}
	return s.werr
}

// Fail finishes the client stream as Close does, for a loop that ends
// on a failure (err: why). When no round completed but the client has
// been sent part of the answer, Close has no end to give it: a format
// whose protocol has an in-band failure then ends the stream with one
// (Responses: response.failed, its error naming a server error), so a
// client that waits for the response's end (a WebSocket client, whose
// stream does not end with the response) gets one. Other formats end as
// Close leaves them: the HTTP stream's own end is their end.
func (s *Stitcher) Fail(err error) error {
	if s.done {
		return s.werr
	}
	cerr := s.Close()
	if !errors.Is(cerr, ErrIncomplete) || !s.wrote {
		return cerr
	}
	f, ok := s.f.(failingFormat)
	if !ok || !f.fail(err, s.out) {
		return cerr
	}
	if s.flush != nil {
		s.flush()
	}
	return s.werr
}

// failingFormat is a streamFormat with an in-band failure event.
type failingFormat interface {
	// fail writes the failure that ends a stream no round of which
	// completed; false when it cannot (nothing to build it from).
	fail(err error, out func([]byte)) bool
}

// sseEvent writes an event with data, one data line per line of data.
func sseEvent(name string, data []byte) []byte {
	out := make([]byte, 0, len(name)+len(data)+16)
	if name != "" {
		out = append(append(append(out, "event: "...), name...), '\n')
	}
	for line := range bytes.SplitSeq(data, []byte{'\n'}) {
		out = append(append(append(out, "data: "...), line...), '\n')
	}
	return append(out, '\n')
}

// setInts returns data with the top-level integer members named in set
// replaced; members absent stay absent.
func setInts(data []byte, root *jsonv.Node, set map[string]int) []byte {
	return spliceOr(data, intEdits(root, set, nil))
}

// intEdits appends the edits of setInts.
func intEdits(root *jsonv.Node, set map[string]int, edits []edit) []edit {
	for _, m := range root.Members {
		if v, ok := set[m.Key]; ok && m.Value.Is(jsonv.Number) {
			edits = append(edits, edit{m.Value.Start, m.Value.End, strconv.AppendInt(nil, int64(v), 10)})
		}
	}
	return edits
}

// intOf reads an integer node; ok is false for anything else.
func intOf(src []byte, n *jsonv.Node) (int, bool) {
	if !n.Is(jsonv.Number) {
		return 0, false
	}
	v, err := strconv.Atoi(string(n.Raw(src)))
	return v, err == nil
}

// parseEvent parses an event's data as a JSON object, or nil.
func parseEvent(ev response.Event) *jsonv.Node {
	if len(ev.Data) == 0 {
		return nil
	}
	root, err := jsonv.Parse(ev.Data, jsonv.MaxDepth)
	if err != nil || !root.Is(jsonv.Object) {
		return nil
	}
	return root
}

// heldEvent is an event kept back, copied (Events reuses its buffers).
type heldEvent struct {
	name      string
	data, raw []byte
}

func hold(ev response.Event) heldEvent {
	return heldEvent{name: ev.Name, data: bytes.Clone(ev.Data), raw: bytes.Clone(ev.Raw)}
}
