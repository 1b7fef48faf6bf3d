package gateway

import (
	"errors"
	"io"
	"sync"
	"time"
)

// errSlowBody: the body did not arrive within body_read_timeout.
var errSlowBody = errors.New("body read timeout")

// pumpedBody reads a request body in its own goroutine, so that the handler
// can stop waiting for a slow client (body_read_timeout) and hand the rest
// of the body on unread, as a stream. A blocked Read of the original body
// cannot be interrupted otherwise: a read deadline on the connection would
// cancel the whole request.
type pumpedBody struct {
	src    io.ReadCloser
	chunks chan []byte
	free   chan []byte // chunks read out, for the loop to fill again
	done   chan struct{}
	once   sync.Once
	cur    []byte // the chunk pending is in

	err     error // the source's final error; written before chunks is closed
	pending []byte
	// deadline bounds Reads while the handler buffers; zero afterwards.
	deadline time.Time
	timer    *time.Timer // next's, made at the first wait
}

// pumpChunk is what one read of the pump takes at most, from a pool
// shared by requests. It is what an idle body holds besides its buffer
// (the pump waits in a read with it), so it stays small.
const pumpChunk = 32 << 10

var pumpChunks = sync.Pool{New: func() any { return new([pumpChunk]byte) }}

func pump(src io.ReadCloser, deadline time.Time) *pumpedBody {
	p := &pumpedBody{src: src, chunks: make(chan []byte, 1), free: make(chan []byte, 2), done: make(chan struct{}), deadline: deadline}
	go p.loop()
	return p
}

func (p *pumpedBody) loop() {
	defer close(p.chunks)
	for {
		var buf []byte
		select {
		case buf = <-p.free:
		default:
			buf = pumpChunks.Get().(*[pumpChunk]byte)[:]
		}
		n, err := p.src.Read(buf)
		if n > 0 {
			select {
			case p.chunks <- buf[:n]:
			case <-p.done:
				return
			}
		}
		if err != nil {
			if n == 0 {
				putChunk(buf) // read into nothing: no one else holds it
			}
			p.err = err
			return
		}
	}
}

func putChunk(c []byte) { pumpChunks.Put((*[pumpChunk]byte)(c[:pumpChunk])) }

// recycle returns the chunks read out to the pool. It is called once the
// loop has stopped filling them (the body's end, or Close): a body that
// ends without a Close (the handler reads it whole, then forwards its own
// buffer) would otherwise leave them, two or three per body, to the
// garbage collector.
func (p *pumpedBody) recycle() {
	for {
		select {
		case c := <-p.free:
			putChunk(c)
		default:
			return
		}
	}
}

// Read returns errSlowBody once the deadline (if set) has passed without
// data; a later Read (after stream) continues where it stopped.
func (p *pumpedBody) Read(b []byte) (int, error) {
	if len(p.pending) == 0 && p.cur != nil {
		// Read out: the loop may fill it again (a body is read by one
		// goroutine at a time, the handler's and then the transport's).
		select {
		case p.free <- p.cur[:cap(p.cur)]:
		default:
			putChunk(p.cur)
		}
		p.cur = nil
	}
	if len(p.pending) == 0 {
		c, ok, err := p.next()
		if err != nil {
			return 0, err
		}
		if !ok {
			p.recycle() // the loop has returned: free is no longer filled from
			return 0, p.err
		}
		p.pending, p.cur = c, c
	}
	n := copy(b, p.pending)
	p.pending = p.pending[n:]
	return n, nil
}

// next waits for the loop's next chunk (ok false: the loop has returned),
// or errSlowBody once the deadline has passed. A chunk already waiting (a
// client that sends faster than the handler copies) is taken without a
// timer; otherwise the pump's one timer is armed for the wait.
func (p *pumpedBody) next() (c []byte, ok bool, err error) {
	if p.deadline.IsZero() {
		c, ok = <-p.chunks
		return c, ok, nil
	}
	d := time.Until(p.deadline)
	if d <= 0 {
		return nil, false, errSlowBody
	}
	select {
	case c, ok = <-p.chunks:
		return c, ok, nil
	default:
	}
	if p.timer == nil {
		p.timer = time.NewTimer(d)
	} else {
		p.timer.Reset(d)
	}
	defer p.timer.Stop()
	select {
	case c, ok = <-p.chunks:
		return c, ok, nil
	case <-p.timer.C:
		return nil, false, errSlowBody
	}
}

// stream lifts the deadline: the rest of the body flows to whoever reads.
func (p *pumpedBody) stream() { p.deadline = time.Time{} }

// Close stops the pump and closes the original body.
func (p *pumpedBody) Close() error {
	p.once.Do(func() {
		close(p.done)
		p.recycle() // the chunks no one holds go back to the pool
	})
	return p.src.Close()
}
