package response

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

var errTrailing = errors.New("response: data after the JSON value")

// DefaultMaxBody bounds a buffered non-streaming body.
const DefaultMaxBody = 4 << 20

// Options configures a Reader.
type Options struct {
	// Stream says the response is Server-Sent Events; otherwise it is one
	// JSON body, buffered up to MaxBody.
	Stream bool
	// Keep lists the tool names whose call arguments are kept (the
	// gateway's own tool); other calls carry only id and name.
	Keep []string
	// MaxBody bounds the buffered non-streaming body, and the kept
	// arguments of a stream. Default DefaultMaxBody. A larger body is not
	// read: Usage().Known is false.
	MaxBody int
}

// Reader extracts usage and tool calls from one provider response. It
// implements io.Writer so the response path can tee the bytes the client
// is sent into it; it never holds them back. Odd input (not JSON, an
// unknown format, an event that does not parse) stops the parse: Usage then
// reports Known false and ToolCalls what was complete before.
type Reader struct {
	opts Options
	f    formatReader

	// non-streaming
	body   []byte
	over   bool
	parsed bool

	// streaming
	events Events
	kept   int // bytes of kept arguments so far

	bad   bool
	usage provider.Usage
	calls []ToolCall
	byKey map[int]int // stream: provider's index of a call -> calls index
	// startInput holds an Anthropic tool_use block's initial input until its
	// block stops: it is the arguments when no input_json_delta follows.
	startInput map[int][]byte
	complete   bool // a stream's terminal event was seen
}

// formatReader is one provider's response shape.
type formatReader interface {
	// body reads a complete non-streaming JSON body.
	body(r *Reader, b []byte) error
	// event reads one SSE event.
	event(r *Reader, ev Event) error
}

// NewReader returns a Reader for responses to requests of format (provider.Chat,
// provider.Responses or provider.Anthropic). Another format yields a Reader that
// reads nothing.
func NewReader(format provider.Format, opts Options) *Reader {
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	r := &Reader{opts: opts}
	switch format {
	case provider.Chat:
		r.f = chatReader{}
	case provider.Responses:
		r.f = responsesReader{}
	case provider.Anthropic:
		r.f = anthropicReader{}
	case FormatGemini:
		r.f = geminiReader{}
	default:
		r.bad = true
	}
	r.events.OnEvent = r.onEvent
	return r
}

// Write feeds the next bytes of the response. It always returns len(p), nil.
func (r *Reader) Write(p []byte) (int, error) {
	if r.bad {
		return len(p), nil
	}
	if r.opts.Stream {
		return r.events.Write(p)
	}
	if r.over {
		return len(p), nil
	}
	if len(r.body)+len(p) > r.opts.MaxBody {
		r.over, r.body = true, nil
		return len(p), nil
	}
	r.body = append(r.body, p...)
	r.parsed = false
	return len(p), nil
}

// Usage returns the usage the provider reported so far (for a stream, the
// figures of the events seen; for a body, of the whole body).
func (r *Reader) Usage() provider.Usage {
	r.finish()
	if r.bad {
		return provider.Usage{}
	}
	return r.usage
}

// Complete reports that a stream's terminal event has been seen (Anthropic
// message_stop; Chat [DONE]; Responses response.completed, .incomplete or
// .failed): the provider's answer is whole, whatever follows. For a JSON
// body it is always false: the caller knows the body's length.
func (r *Reader) Complete() bool { return r.opts.Stream && r.complete }

// ToolCalls returns the tool calls seen, in the response's order. For a
// stream cut short the last call may lack the end of its arguments.
func (r *Reader) ToolCalls() []ToolCall {
	r.finish()
	return slices.Clone(r.calls)
}

// finish parses a buffered body once.
func (r *Reader) finish() {
	if r.opts.Stream || r.bad || r.parsed {
		return
	}
	r.parsed = true
	if r.over || len(r.body) == 0 {
		r.usage = provider.Usage{}
		return
	}
	r.usage, r.calls = provider.Usage{}, nil
	if err := r.f.body(r, r.body); err != nil {
		r.usage, r.calls = provider.Usage{}, nil
	}
}

func (r *Reader) onEvent(ev Event) {
	if r.bad || len(ev.Data) == 0 {
		return
	}
	if err := r.f.event(r, ev); err != nil {
		r.bad = true
	}
}

// keeps reports whether the arguments of calls to name are kept.
func (r *Reader) keeps(name string) bool { return slices.Contains(r.opts.Keep, name) }

// addCall appends a complete call, keeping its arguments when asked to.
func (r *Reader) addCall(id, name string, args []byte) {
	c := ToolCall{ID: id, Name: name}
	if r.keeps(name) {
		c.Arguments = bytes.Clone(args)
	}
	r.calls = append(r.calls, c)
}

// streamCall returns the call the provider numbers key, starting it when new.
func (r *Reader) streamCall(key int) *ToolCall {
	if r.byKey == nil {
		r.byKey = map[int]int{}
	}
	i, ok := r.byKey[key]
	if !ok {
		i = len(r.calls)
		r.byKey[key] = i
		r.calls = append(r.calls, ToolCall{})
	}
	return &r.calls[i]
}

// appendArgs adds a streamed piece of a kept call's arguments, within
// MaxBody over the whole stream.
func (r *Reader) appendArgs(c *ToolCall, piece string) {
	if !r.keeps(c.Name) {
		return
	}
	if r.kept+len(piece) > r.opts.MaxBody {
		r.bad = true
		return
	}
	r.kept += len(piece)
	c.Arguments = append(c.Arguments, piece...)
}

var errNotJSON = errors.New("response: not JSON")

// validJSON checks an event the reader skips, so odd input stops the parse
// whether or not the event mattered.
func validJSON(b []byte) error {
	if !json.Valid(b) {
		return errNotJSON
	}
	return nil
}

// decode is strict enough for provider JSON: one value, nothing after it.
func decode(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errTrailing
	}
	return nil
}
