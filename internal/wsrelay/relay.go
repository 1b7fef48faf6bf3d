package wsrelay

import (
	"bufio"
	"crypto/rand"
	"io"
	"unicode/utf8"
)

// Rewrite is asked for a replacement of one whole client text message
// (valid UTF-8, within the bound); ok false forwards the message as it
// came. It must not keep msg.
type Rewrite func(msg []byte) (out []byte, ok bool)

// Reader is the client-to-server direction: it reads the client's frames
// from src and yields the bytes for the server.
type Reader struct {
	in      io.Reader // the client's stream, under src
	src     *bufio.Reader
	max     int64
	rewrite Rewrite

	out []byte // bytes ready to hand out
	off int

	stream  int64 // bytes of the current frame (header and payload) copied as they come
	raw     bool  // a plain byte copy for good
	passing bool  // inside a message forwarded as it comes: its continuations stream
	holding bool  // inside a text message held until it is whole
	held    []byte
	ctrl    []byte // of held, the control frames between the message's fragments
	msg     []byte // the held message's payload, unmasked
	err     error

	inj *injector // nil unless EnableInject
	// Admit, when set, is asked before each data frame of a held message
	// is read, with the bytes holding it takes (the frame as sent and its
	// payload unmasked); false: the message is held no further and goes
	// on as it comes, what was held first, as one over the bound does.
	Admit func(n int64) bool
	// Passed, when set, is told of a text message that would have been
	// offered to the rewrite but goes on unread, over the bound (over) or
	// refused by Admit: prefix is the start of its payload, unmasked, at
	// most PassedPrefix bytes; it must not be kept.
	Passed func(prefix []byte, over bool)
}

// PassedPrefix bounds the payload Reader.Passed is shown: enough for a
// message's leading "type" member.
const PassedPrefix = 512

// keepMax is the buffer capacity a Reader keeps between messages; a
// larger one, grown for one large message, is let go once it has been
// handed on, so an idle socket holds no more than this.
const keepMax = 1 << 20

// NewReader relays the client frames read from src; text messages up to
// max payload bytes are offered to rewrite.
func NewReader(src io.Reader, max int64, rewrite Rewrite) *Reader {
	return &Reader{in: src, src: bufio.NewReaderSize(src, 32<<10), max: max, rewrite: rewrite}
}

// Read implements io.Reader.
func (r *Reader) Read(p []byte) (int, error) {
	for {
		if r.off < len(r.out) {
			n := copy(p, r.out[r.off:])
			r.off += n
			if r.off == len(r.out) {
				r.out, r.off = r.out[:0], 0
				if cap(r.out) > keepMax {
					r.out = nil
				}
			}
			return n, nil
		}
		if r.err != nil {
			r.inj.stop()
			return 0, r.err
		}
		if r.inj != nil && r.atBoundary() {
			if f := r.inj.take(); f != nil {
				r.out, r.off = append(r.out[:0], f...), 0
				continue
			}
		}
		if r.raw || r.stream > 0 {
			q := p
			if !r.raw && int64(len(q)) > r.stream {
				q = q[:r.stream]
			}
			n, err := r.src.Read(q)
			if !r.raw {
				r.stream -= int64(n)
			}
			if err != nil {
				r.err = err
			}
			if n > 0 {
				return n, nil
			}
			continue
		}
		if err := r.next(); err != nil {
			r.err = err
			if r.holding { // what was held goes on before the error
				r.out, r.off = append(r.out[:0], r.held...), 0
				r.holding = false
			}
		}
	}
}

// goRaw hands out what is held and copies every later byte as it comes.
func (r *Reader) goRaw() {
	if r.holding {
		r.out, r.off = append(r.out[:0], r.held...), 0
		r.holding = false
	}
	r.raw = true
	r.inj.stop()
}

// next reads the next frame header and decides what happens to the frame.
func (r *Reader) next() error {
	b, err := r.peek(2)
	switch {
	case err == errWake:
		return nil
	case len(b) == 0:
		return err
	case len(b) < 2:
		r.goRaw() // a partial header goes on as it came, then the error
		return nil
	}
	size := 2
	switch b[1] & 0x7F {
	case 126:
		size += 2
	case 127:
		size += 8
	}
	if b[1]&0x80 != 0 {
		size += 4
	}
	b, err = r.peek(size)
	if err == errWake {
		return nil
	}
	if len(b) < size {
		r.goRaw() // the partial header goes on as it came, then the error
		return nil
	}
	h, _, perr := ParseHeader(b)
	if perr != nil || !clientValid(h, r.holding || r.passing) {
		r.goRaw()
		return nil
	}
	whole := int64(h.Size) + h.Length
	switch {
	case h.Control():
		if r.holding {
			return r.hold(h, false)
		}
		r.stream = whole
	case h.Op == OpContinuation && r.passing:
		r.passing = !h.Fin
		r.stream = whole
	case h.Op == OpContinuation: // of a held message
		if over := int64(len(r.msg))+h.Length > r.max; over || !r.admit(whole+h.Length) {
			r.passed(r.msg, over)
			r.out, r.off = append(r.out[:0], r.held...), 0
			r.holding, r.passing = false, !h.Fin
			r.stream = whole
			return nil
		}
		return r.hold(h, true)
	case h.Op == OpText && r.rewrite != nil && h.Length <= r.max && r.admit(whole+h.Length):
		r.holding = true
		r.held, r.ctrl, r.msg = r.held[:0], r.ctrl[:0], r.msg[:0]
		return r.hold(h, true)
	case h.Op == OpText && r.rewrite != nil: // over the bound, or not admitted
		r.passed(r.peekPayload(h), h.Length > r.max)
		r.passing = !h.Fin
		r.stream = whole
	default: // binary, or a text message not offered
		r.passing = !h.Fin
		r.stream = whole
	}
	return nil
}

// peek peeks at a frame header. At a message boundary an injection may
// interrupt the wait for it (errWake), and then goes out first: nothing of
// the frame has been handed out.
func (r *Reader) peek(n int) ([]byte, error) {
	if r.inj == nil {
		return r.src.Peek(n)
	}
	r.inj.pump.wakeable = !r.holding && !r.passing
	b, err := r.src.Peek(n)
	r.inj.pump.wakeable = false
	return b, err
}

// admit asks Admit, when set, for n more bytes of holding.
func (r *Reader) admit(n int64) bool { return r.Admit == nil || r.Admit(n) }

// passed tells Passed, when set, of a message going on unread.
func (r *Reader) passed(prefix []byte, over bool) {
	if r.Passed != nil {
		r.Passed(prefix[:min(len(prefix), PassedPrefix)], over)
	}
}

// peekPayload is the start of a frame's payload, unmasked, read ahead
// without consuming it (the frame streams on as it came).
func (r *Reader) peekPayload(h Header) []byte {
	if r.Passed == nil {
		return nil
	}
	b, _ := r.src.Peek(h.Size + int(min(h.Length, PassedPrefix)))
	if len(b) <= h.Size {
		return nil
	}
	p := append([]byte(nil), b[h.Size:]...)
	MaskBytes(h.Key, 0, p)
	return p
}

// Buffered is the bytes decided and not yet handed out: 0 once a
// message's bytes have all been read from the Reader.
func (r *Reader) Buffered() int { return len(r.out) - r.off }

// clientValid reports a frame header a conforming client sends, given
// whether a fragmented message is open.
func clientValid(h Header, inMessage bool) bool {
	if h.Rsv != 0 || !h.Masked {
		return false
	}
	switch h.Op {
	case OpClose, OpPing, OpPong:
		return h.Fin && h.Length <= 125
	case OpContinuation:
		return inMessage
	case OpText, OpBinary:
		return !inMessage
	}
	return false
}

// hold reads a whole frame into held; a data frame's payload joins msg
// and its last frame completes the message.
func (r *Reader) hold(h Header, data bool) error {
	start := len(r.held)
	whole := int(int64(h.Size) + h.Length)
	r.held = append(r.held, make([]byte, whole)...)
	if n, err := io.ReadFull(r.src, r.held[start:]); err != nil {
		// What came goes on, then the end, as a plain copy would.
		r.held = r.held[:start+n]
		if err == io.ErrUnexpectedEOF {
			err = io.EOF
		}
		return err
	}
	if !data {
		r.ctrl = append(r.ctrl, r.held[start:]...)
		return nil
	}
	m := len(r.msg)
	r.msg = append(r.msg, r.held[start+h.Size:]...)
	MaskBytes(h.Key, 0, r.msg[m:])
	if h.Fin {
		r.finish()
	}
	return nil
}

// finish decides on a whole held message.
func (r *Reader) finish() {
	r.holding = false
	r.out, r.off = r.out[:0], 0
	out, ok := []byte(nil), false
	if utf8.Valid(r.msg) {
		out, ok = r.rewrite(r.msg)
	}
	if ok {
		var key [4]byte
		_, _ = rand.Read(key[:])
		r.out = append(r.out, r.ctrl...)
		r.out = AppendFrame(r.out, true, OpText, true, key, out)
	} else {
		r.out = append(r.out, r.held...)
	}
	if cap(r.held) > keepMax {
		r.held, r.ctrl, r.msg = nil, nil, nil
	}
}

// Tap is the server-to-client direction: it writes every byte to W as it
// comes and hands each whole text message of at most Max payload bytes to
// On, after the bytes were written. A frame it cannot read (reserved bits,
// a masked server frame) stops the observing, never the bytes.
type Tap struct {
	W   io.Writer
	Max int64
	On  func(msg []byte)

	hdr     []byte
	left    int64
	cur     Header
	inText  bool
	collect bool
	msg     []byte
	dead    bool

	// Divert, when set, is asked at the first frame of each text message
	// whether the message goes whole to Diverted instead of W (divert.go).
	Divert   func() bool
	Diverted func(msg []byte)
	// Dropped, when set, changes what happens to a diverted message that
	// outgrows Max: it is dropped whole (the frames held so far and its
	// later data frames; control frames between them still go out), and
	// Dropped is told at its end instead of Diverted, with the start of
	// its payload (at most PassedPrefix bytes; it must not be kept).
	Dropped func(prefix []byte)
	div     diversion
	holdHdr bool // the header being read is held with a diverted message
}

// startData takes a data frame's header: a text message starts being
// collected for On, a binary one is not, and a message that would pass Max
// stops being collected; over reports that it just did.
func (t *Tap) startData(h Header) (over bool) {
	switch h.Op {
	case OpText:
		t.inText, t.collect, t.msg = true, true, t.msg[:0]
	case OpBinary:
		t.inText, t.collect = false, false
	}
	if t.collect && int64(len(t.msg))+h.Length > t.Max {
		t.collect, t.msg = false, t.msg[:0]
		return true
	}
	return false
}

// Write implements io.Writer.
func (t *Tap) Write(p []byte) (int, error) {
	if t.Divert != nil {
		return t.writeDivert(p)
	}
	n, err := t.W.Write(p)
	t.observe(p[:n])
	return n, err
}

func (t *Tap) observe(p []byte) {
	for len(p) > 0 && !t.dead {
		if t.left > 0 {
			k := int(min(t.left, int64(len(p))))
			if t.collect && !t.cur.Control() {
				t.msg = append(t.msg, p[:k]...)
			}
			p, t.left = p[k:], t.left-int64(k)
			if t.left == 0 {
				t.endFrame()
			}
			continue
		}
		t.hdr = append(t.hdr, p[0])
		p = p[1:]
		h, ok, err := ParseHeader(t.hdr)
		if err != nil || (ok && (h.Rsv != 0 || h.Masked)) {
			t.dead = true
			return
		}
		if !ok {
			continue
		}
		t.hdr, t.cur, t.left = t.hdr[:0], h, h.Length
		if !h.Control() {
			t.startData(h)
		}
		if t.left == 0 {
			t.endFrame()
		}
	}
}

func (t *Tap) endFrame() {
	if t.cur.Control() || !t.cur.Fin {
		return
	}
	if t.inText && t.collect && t.On != nil {
		t.On(t.msg)
	}
	t.inText, t.collect, t.msg = false, false, t.msg[:0]
}
