package response

import "bytes"

// Event is one Server-Sent Event as it crossed the wire.
type Event struct {
	Name string // the last "event:" field; empty when absent (OpenAI Chat)
	Data []byte // the "data:" lines joined with '\n'; valid only during OnEvent
	// Raw is the exact bytes of the event, its terminating blank line
	// included, so a consumer that does not change an event forwards it byte
	// for byte. Valid only during OnEvent. A run of comment lines or a stray
	// blank line is an event too (no Name, no Data): keep-alives pass through.
	Raw []byte
}

// DefaultMaxEvent bounds one buffered event. The largest events providers
// send are Responses' response.completed (the whole response again) and
// output_item.done (a whole tool call); 4 MiB covers both.
const DefaultMaxEvent = 4 << 20

// Events is the incremental SSE scanner (the one SSE parser of the
// codebase). Write is fed the stream in pieces of any size; every event is
// handed to OnEvent as soon as its blank line arrives, so nothing waits for
// the stream to end. Lines end in "\n", "\r\n" or "\r", also when the two
// bytes of a "\r\n" arrive in different writes.
//
// Memory is bounded by Max: an event larger than that is skipped whole (its
// bytes are dropped and OnOversize, when set, is called once for it), and
// scanning resumes with the next event.
type Events struct {
	Max        int // default DefaultMaxEvent
	OnEvent    func(Event)
	OnOversize func()

	raw      []byte // bytes of the event in progress (empty while skipping)
	lineAt   int    // offset in raw where the current line starts
	lineLen  int    // bytes of the current line so far (counted while skipping too)
	data     []byte
	name     string
	skipping bool // the event in progress outgrew Max
	lastCR   bool // the previous byte was a '\r' line ending
	blankCR  bool // ... and it ended a blank line: the event ends there or after a '\n'
	any      bool // the event in progress has bytes
	hadData  bool // the event in progress had a data line (possibly empty)
}

// Write scans p. It always consumes all of p and never fails.
func (e *Events) Write(p []byte) (int, error) {
	for i := 0; i < len(p); i++ {
		// The bytes of a line up to its end are copied as one run.
		if !e.lastCR {
			if j := bytes.IndexAny(p[i:], "\r\n"); j != 0 {
				if j < 0 {
					j = len(p) - i
				}
				e.pushRun(p[i : i+j])
				e.lineLen += j
				if i += j; i == len(p) {
					break
				}
			}
		}
		c := p[i]
		if e.lastCR {
			e.lastCR = false
			if c == '\n' { // the second half of "\r\n"
				e.push(c)
				e.lineAt = len(e.raw)
				if e.blankCR {
					e.dispatch()
				}
				continue
			}
			if e.blankCR {
				e.dispatch()
			}
		}
		e.push(c)
		if c != '\n' && c != '\r' {
			e.lineLen++
			continue
		}
		blank := e.lineLen == 0
		if !e.skipping {
			e.field(e.raw[e.lineAt : len(e.raw)-1])
		}
		e.lineLen = 0
		e.lineAt = len(e.raw)
		if c == '\r' {
			e.lastCR, e.blankCR = true, blank
			continue
		}
		if blank {
			e.dispatch()
		}
	}
	return len(p), nil
}

// Flush ends the stream: an event left unterminated is dispatched (the SSE
// spec would discard it; a consumer forwarding a stream cut short still
// wants every byte that arrived).
func (e *Events) Flush() {
	if e.lastCR {
		e.lastCR = false
		if e.blankCR {
			e.dispatch()
		}
	}
	if e.any {
		if !e.skipping && e.lineAt < len(e.raw) {
			e.field(e.raw[e.lineAt:])
		}
		e.dispatch()
	}
}

// Reset discards an event left unterminated (a stream cut short), as the
// SSE spec does, and readies the scanner for a new stream.
func (e *Events) Reset() {
	e.skipping = true // dispatch drops the event
	e.dispatch()
}

// pushRun appends bytes that hold no line ending.
func (e *Events) pushRun(run []byte) {
	e.any = true
	if e.skipping {
		return
	}
	if len(e.raw)+len(run) > e.max() {
		// Past the bound: the byte that crosses it starts the skip.
		room := e.max() - len(e.raw)
		e.raw = append(e.raw, run[:room]...)
		e.push(run[room])
		return
	}
	e.raw = append(e.raw, run...)
}

func (e *Events) max() int {
	if e.Max <= 0 {
		return DefaultMaxEvent
	}
	return e.Max
}

func (e *Events) push(c byte) {
	e.any = true
	if e.skipping {
		return
	}
	if len(e.raw) >= e.max() {
		e.skipping = true
		e.raw, e.data, e.lineAt = e.raw[:0], e.data[:0], 0
		if e.OnOversize != nil {
			e.OnOversize()
		}
		return
	}
	e.raw = append(e.raw, c)
}

// field applies one line (without its ending) to the event in progress.
func (e *Events) field(line []byte) {
	if len(line) == 0 || line[0] == ':' {
		return
	}
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) {
	case "data":
		if e.hadData { // "data:\ndata: x" joins as "\nx", as the spec says
			e.data = append(e.data, '\n')
		}
		e.data = append(e.data, value...)
		e.hadData = true
	case "event":
		e.name = string(value)
	}
}

func (e *Events) dispatch() {
	if !e.skipping && e.OnEvent != nil {
		e.OnEvent(Event{Name: e.name, Data: e.data, Raw: e.raw})
	}
	e.raw, e.data, e.name = e.raw[:0], e.data[:0], ""
	e.lineAt, e.lineLen = 0, 0
	e.skipping, e.any, e.hadData = false, false, false
	e.lastCR, e.blankCR = false, false
}
