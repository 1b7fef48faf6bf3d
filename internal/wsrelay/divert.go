package wsrelay

// Diversion: with Tap.Divert set, the tap reads the server's frames before
// writing them. A text message Divert claims (asked at its first frame) is
// held, frames and all, and handed whole to Diverted, which writes what
// the client gets in its place; control frames between its fragments are
// written as they come. Every other frame is written as it came, in order,
// and On observes its text messages as without diversion. A diverted
// message that grows past Max is written as it came from that point on
// (the frames held so far first), and Diverted gets nil at its end: the
// owner knows a message escaped; with Dropped set, such a message is
// dropped whole instead and Dropped is told (a server-to-client message
// left out leaves the stream well framed: the client never saw a byte of
// it). A frame the tap cannot read (reserved
// bits, a masked server frame) ends observing and diverting for good:
// what is held goes out, then every byte as it comes (and Diverted gets
// nil if a diverted message was under way).

// diversion is the tap's state for diverting.
type diversion struct {
	on      bool   // the current message is diverted
	spilled bool   // the current diverted message outgrew Max
	dropped bool   // it outgrew Max and is being dropped (Tap.Dropped)
	prefix  []byte // the start of a dropped message's payload
	held    []byte // its frames so far
	wbuf    []byte // bytes to write, gathered within one Write
}

func (t *Tap) writeDivert(p []byte) (int, error) {
	d, n, lost := &t.div, len(p), false
	for len(p) > 0 {
		if t.dead {
			d.wbuf = append(d.wbuf, p...)
			break
		}
		if t.left > 0 {
			k := int(min(t.left, int64(len(p))))
			t.payload(p[:k])
			p, t.left = p[k:], t.left-int64(k)
			if t.left == 0 {
				if err := t.endDiverted(); err != nil {
					return 0, err
				}
			}
			continue
		}
		t.headerByte(p[0])
		p = p[1:]
		h, ok, err := ParseHeader(t.hdr)
		if err != nil || (ok && (h.Rsv != 0 || h.Masked)) {
			t.dead, lost = true, d.on || d.spilled || d.dropped
			d.wbuf = append(d.wbuf, d.held...)
			if t.holdHdr {
				d.wbuf = append(d.wbuf, t.hdr...)
			}
			t.hdr, d.held, d.on, d.spilled, d.dropped = t.hdr[:0], nil, false, false, false
			continue
		}
		if !ok {
			continue
		}
		t.header(h)
		if t.left == 0 {
			if err := t.endDiverted(); err != nil {
				return 0, err
			}
		}
	}
	if err := t.flush(); err != nil {
		return 0, err
	}
	if lost {
		t.Diverted(nil)
	}
	return n, nil
}

// headerByte takes a header byte. The first names the opcode, which is
// all a diversion is decided on: a new text message is offered to Divert
// there. While no diverted message is open, header bytes go out as they
// come; inside one, a header waits until it is whole (a control frame's
// then goes out, a fragment's is held with the message, and an unreadable
// one follows what was held).
func (t *Tap) headerByte(b byte) {
	d := &t.div
	if len(t.hdr) == 0 {
		if op := b & 0x0F; b&0x70 == 0 && (op == OpText || op == OpBinary) {
			// A new message; one still held (cut off by it, as no
			// conforming server does) goes out as it came.
			d.wbuf = append(d.wbuf, d.held...)
			d.on, d.spilled, d.dropped, d.held = op == OpText && t.Divert(), false, false, d.held[:0]
		}
		t.holdHdr = d.on || d.dropped
	}
	t.hdr = append(t.hdr, b)
	if !t.holdHdr {
		d.wbuf = append(d.wbuf, b)
	}
}

// header takes a parsed frame header.
func (t *Tap) header(h Header) {
	d := &t.div
	hdr := t.hdr
	t.cur, t.left, t.hdr = h, h.Length, t.hdr[:0]
	if h.Control() {
		if t.holdHdr {
			d.wbuf = append(d.wbuf, hdr...)
		}
		return
	}
	var before []byte // the message's payload before this frame
	if h.Op == OpContinuation {
		before = t.msg
	}
	if t.startData(h) && d.on {
		if t.Dropped != nil {
			d.prefix = append(d.prefix[:0], before[:min(len(before), PassedPrefix)]...)
			d.on, d.dropped, d.held = false, true, d.held[:0]
		} else {
			d.wbuf = append(d.wbuf, d.held...)
			d.on, d.spilled, d.held = false, true, d.held[:0]
		}
	}
	switch {
	case d.on:
		d.held = append(d.held, hdr...)
	case d.dropped: // its frames never go out
	case t.holdHdr: // spilled just now
		d.wbuf = append(d.wbuf, hdr...)
	}
}

// payload takes payload bytes of the current frame.
func (t *Tap) payload(b []byte) {
	d := &t.div
	if t.collect && !t.cur.Control() {
		t.msg = append(t.msg, b...)
	}
	if d.dropped && !t.cur.Control() {
		if k := min(len(b), PassedPrefix-len(d.prefix)); k > 0 {
			d.prefix = append(d.prefix, b[:k]...)
		}
		return
	}
	if d.on && !t.cur.Control() {
		d.held = append(d.held, b...)
		return
	}
	d.wbuf = append(d.wbuf, b...)
}

// flush writes what was gathered for W.
func (t *Tap) flush() error {
	d := &t.div
	if len(d.wbuf) == 0 {
		return nil
	}
	_, err := t.W.Write(d.wbuf)
	d.wbuf = d.wbuf[:0]
	return err
}

// endDiverted ends a frame: at a message's end, a diverted message goes
// to Diverted and an observed one to On, after what precedes it was
// written.
func (t *Tap) endDiverted() error {
	d := &t.div
	if t.cur.Control() || !t.cur.Fin {
		return nil
	}
	if err := t.flush(); err != nil {
		return err
	}
	switch {
	case d.on:
		t.Diverted(t.msg)
	case d.dropped:
		t.Dropped(d.prefix)
	case d.spilled:
		t.Diverted(nil)
	case t.inText && t.collect && t.On != nil:
		t.On(t.msg)
	}
	d.on, d.spilled, d.dropped, d.held, d.prefix = false, false, false, d.held[:0], d.prefix[:0]
	t.inText, t.collect, t.msg = false, false, t.msg[:0]
	return nil
}
