package wsrelay

import (
	"crypto/rand"
	"errors"
	"io"
	"sync"
)

// Injection: a Reader with injection enabled can be handed whole client
// messages (already framed and masked) from another goroutine; each goes
// out at the next message boundary of the client's stream, never inside a
// message the client is sending (between its fragments, the injection
// waits for the last one). When the reader is blocked waiting for the
// client's next frame, an injection wakes it: the client's bytes are read
// by a pump goroutine, and the reader waits on the pump and the wake-up
// together. A reader that switched to a plain copy, or whose client
// stream ended, injects nothing more.

// errWake is the pump's answer to a read interrupted by an injection.
var errWake = errors.New("wsrelay: woken for an injection")

// ClientText frames msg as one masked client text frame.
func ClientText(msg []byte) []byte {
	var key [4]byte
	_, _ = rand.Read(key[:])
	return AppendFrame(nil, true, OpText, true, key, msg)
}

// injection is one queued message.
type injection struct{ frames []byte }

// injector is the queue of messages to inject.
type injector struct {
	mu   sync.Mutex
	q    []*injection
	shut bool
	pump *pump
}

// EnableInject turns injection on; it must be called before the first
// Read. Close stops the pump it starts.
func (r *Reader) EnableInject() {
	p := newPump(r.in)
	r.src.Reset(p)
	r.inj = &injector{pump: p}
}

// Inject queues frames, one whole client message, to go out at the next
// message boundary. It returns a cancel function, which withdraws the
// message if it has not gone out yet and reports whether it did; ok is
// false when nothing can be injected any more (not enabled, a plain copy,
// the client's stream ended).
func (r *Reader) Inject(frames []byte) (cancel func() bool, ok bool) {
	in := r.inj
	if in == nil {
		return nil, false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.shut {
		return nil, false
	}
	it := &injection{frames: frames}
	in.q = append(in.q, it)
	select {
	case in.pump.wake <- struct{}{}:
	default:
	}
	return func() bool {
		in.mu.Lock()
		defer in.mu.Unlock()
		for i, q := range in.q {
			if q == it {
				in.q = append(in.q[:i], in.q[i+1:]...)
				return true
			}
		}
		return false
	}, true
}

// Close stops the pump (the source itself is the caller's to close).
func (r *Reader) Close() {
	if r.inj != nil {
		r.inj.stop()
		r.inj.pump.close()
	}
}

// stop refuses injections from now on and drops the queued ones.
func (in *injector) stop() {
	if in == nil {
		return
	}
	in.mu.Lock()
	in.shut, in.q = true, nil
	in.mu.Unlock()
}

// take returns the next queued message, or nil.
func (in *injector) take() []byte {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.q) == 0 {
		return nil
	}
	it := in.q[0]
	in.q = in.q[1:]
	return it.frames
}

// atBoundary reports whether a message may go out now: nothing of a frame
// or a message is under way.
func (r *Reader) atBoundary() bool {
	return !r.raw && !r.holding && !r.passing && r.stream == 0 && r.off >= len(r.out)
}

// pumpChunk is the size of the pump's reads.
const pumpChunk = 32 << 10

// pump reads the client's bytes on its own goroutine, two buffers at most
// ahead of the reader, so that a read waiting for them can be woken.
type pump struct {
	chunks chan []byte
	free   chan []byte
	wake   chan struct{}
	done   chan struct{}
	once   sync.Once
	srcErr error // set before chunks is closed

	cur, buf []byte
	err      error
	wakeable bool // only the reader's goroutine sets it
}

func newPump(src io.Reader) *pump {
	p := &pump{chunks: make(chan []byte), free: make(chan []byte, 2), wake: make(chan struct{}, 1), done: make(chan struct{})}
	p.free <- make([]byte, pumpChunk)
	p.free <- make([]byte, pumpChunk)
	go p.run(src)
	return p
}

func (p *pump) run(src io.Reader) {
	defer close(p.chunks)
	for {
		var buf []byte
		select {
		case buf = <-p.free:
		case <-p.done:
			p.srcErr = io.ErrClosedPipe
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case p.chunks <- buf[:n]:
			case <-p.done:
				p.srcErr = io.ErrClosedPipe
				return
			}
		} else {
			p.free <- buf
		}
		if err != nil {
			p.srcErr = err
			return
		}
	}
}

func (p *pump) close() { p.once.Do(func() { close(p.done) }) }

// Read hands out the pump's bytes; while wakeable, an injection
// interrupts a wait with errWake.
func (p *pump) Read(b []byte) (int, error) {
	for len(p.cur) == 0 {
		if p.buf != nil {
			p.free <- p.buf[:cap(p.buf)]
			p.buf = nil
		}
		if p.err != nil {
			return 0, p.err
		}
		var wake chan struct{}
		if p.wakeable {
			wake = p.wake
		}
		select {
		case c, ok := <-p.chunks:
			if !ok {
				p.err = p.srcErr
				if p.err == nil {
					p.err = io.EOF
				}
				continue
			}
			p.cur, p.buf = c, c
		case <-wake:
			return 0, errWake
		}
	}
	n := copy(b, p.cur)
	p.cur = p.cur[n:]
	return n, nil
}
