package gateway

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
)

// refuseUnread decides from the headers alone that a candidate streams
// through untouched: a body the module cannot decode, or one declared
// larger than max_body_size.
func (g *Gateway) refuseUnread(r *http.Request) (compiler.Reason, bool) {
	if _, ok := requestCoding(r); !ok { // encoding.go
		return ReasonContentEncoding, false
	}
	if r.ContentLength > g.MaxBodySize {
		return ReasonTooLarge, false
	}
	return "", true
}

// readBody reads a candidate's body within max_body_size, holding no more
// than max_buffered_bytes at once: the buffer grows with the bytes that
// arrive (a declared length sizes its last step, never a reservation up
// front), and each step is reserved within the share of bodies being read
// (admission.go). On a non-empty reason the body (what was read, then the
// rest) streams through untouched. res is the reservation; its release is
// due when the upstream is done with the body; the working memory is
// reserved later, by admitWork, once the body is whole; compiles is false
// for a body that will only be forwarded, which never reserves any. The
// body read whole is held by ex.body (bodybuf.go); its reference is
// dropped by the caller.
func (g *Gateway) readBody(r *http.Request, ex *exchange, compiles bool) (buf []byte, reason compiler.Reason, res *reservation) {
	o := &ex.out
	res = g.reserve(compiles)

	orig := r.Body
	if orig == nil {
		orig = http.NoBody
	}
	var pumped *pumpedBody
	if g.BodyReadTimeout > 0 && orig != http.NoBody {
		pumped = pump(orig, ex.start.Add(g.BodyReadTimeout))
		orig = pumped
	}
	ex.body = newBodyBuffer(0) // replaced by the pooled buffer of a declared length, once the body reaches it
	var whole func(size int64) []byte
	if r.ContentLength >= 0 && r.ContentLength <= g.MaxBodySize {
		whole = func(size int64) []byte {
			ex.body = newBodyBuffer(size)
			return ex.body.b
		}
	}
	buf, over, busy, readErr := readAtMostInto(orig, g.MaxBodySize, r.ContentLength, res.grow, whole)
	res.doneReading()
	o.read = time.Since(ex.start)
	ex.body.keep(buf)
	if readErr != nil || over || busy {
		// Handed on below through readers that take no reference.
		ex.body.abandon()
	}
	if errors.Is(readErr, errSlowBody) {
		// A slow client: stream what came and the rest through, so the
		// request does not hold buffer budget while it trickles in.
		pumped.stream()
		r.Body = readCloser{io.MultiReader(bytes.NewReader(buf), orig), orig}
		if r.ContentLength < 0 {
			o.rawBytes, o.sentBytes = -1, -1
		}
		return nil, ReasonSlowBody, res
	}
	if pumped != nil {
		pumped.stream()
	}
	switch {
	case readErr != nil:
		// The body already read cannot be un-read: forward it followed by
		// the same error, so upstream sees what it would have seen without
		// the module.
		r.Body = readCloser{io.MultiReader(bytes.NewReader(buf), errReader{readErr}), orig}
		o.rawBytes, o.sentBytes = int64(len(buf)), int64(len(buf))
		return nil, ReasonReadError, res
	case over, busy:
		// Too large (or past the budget) without a Content-Length: stream
		// the rest through.
		r.Body = readCloser{io.MultiReader(bytes.NewReader(buf), orig), orig}
		if r.ContentLength < 0 {
			o.rawBytes, o.sentBytes = -1, -1
		}
		if busy {
			return nil, ReasonBusy, res
		}
		return nil, ReasonTooLarge, res
	}
	return buf, "", res
}

// setBody makes b the request body, with a consistent Content-Length, no
// Transfer-Encoding and a GetBody for transports that rewind. When b lies
// in the body buffer o (nil for none), each reader holds o until its EOF or
// Close, so the transport may go on reading after the handler returned.
func setBody(r *http.Request, o *bodyBuffer, b []byte) {
	r.ContentLength = int64(len(b))
	r.Header.Set("Content-Length", strconv.Itoa(len(b)))
	r.Header.Del("Transfer-Encoding")
	r.TransferEncoding = nil
	if o.owns(b) {
		if rc, ok := o.reader(b); ok { // the caller holds o: always ok
			r.Body = rc
			r.GetBody = func() (io.ReadCloser, error) {
				if rc, ok := o.reader(b); ok {
					return rc, nil
				}
				return nil, errBodyReleased
			}
			return
		}
		b = bytes.Clone(b)
	}
	r.Body = plainBody(b)
	r.GetBody = func() (io.ReadCloser, error) { return plainBody(b), nil }
}

// errBodyReleased: a rewind asked for a body whose every holder was done
// (no transport rewinds after its round trip; refused rather than risked).
var errBodyReleased = errors.New("request body already released")

// readAtMost reads up to limit+1 bytes of body. over reports that the body
// is longer than limit (buf then holds limit+1 bytes and the rest is still
// unread in body). hint is the declared Content-Length (or -1). grow, if
// set, must reserve every byte of capacity the buffer grows by; when it
// refuses, busy is set and the rest of the body is unread.
func readAtMost(body io.Reader, limit, hint int64, grow func(n int64) bool) (buf []byte, over, busy bool, err error) {
	return readAtMostInto(body, limit, hint, grow, nil)
}

// firstChunk is the buffer a body with a longer declared length starts
// in: what one read of the pump (pumpChunk) delivers.
const firstChunk = pumpChunk

// readAtMostInto is readAtMost that grows its buffer with the bytes read:
// a body with a declared length starts in firstChunk bytes (or its length
// + 1, if less; +1 so that EOF is seen without growing) and grows fourfold
// up to that, so its capacity stays within four times what arrived, and a
// client that declares a large body and sends nothing holds one chunk. The
// last step, to exactly the declared length + 1, is whole's buffer (nil:
// a new one). Past the declared length (a lying one), or without one, the
// buffer grows as append grows it.
func readAtMostInto(body io.Reader, limit, hint int64, grow func(n int64) bool, whole func(size int64) []byte) (buf []byte, over, busy bool, err error) {
	declared := hint >= 0 && hint <= limit
	alloc := func(n int64) []byte {
		if declared && n == hint+1 && whole != nil {
			if b := whole(n); int64(cap(b)) >= n {
				return b[:0]
			}
		}
		return growSteps.get(n)
	}
	size := int64(512)
	if declared {
		size = min(hint+1, firstChunk)
	}
	if grow != nil && !grow(size) {
		return nil, false, true, nil
	}
	buf = alloc(size)
	lr := io.LimitReader(body, limit+1)
	for {
		if len(buf) == cap(buf) {
			old := int64(cap(buf))
			var next []byte
			if declared && old < hint+1 {
				n := min(hint+1, 4*old)
				if grow != nil && !grow(n-old) {
					return buf, false, true, nil
				}
				next = append(alloc(n), buf...)
				growSteps.put(buf) // replaced: no one else holds it
			} else {
				next = append(buf, 0)[:len(buf)]
				if grow != nil && !grow(int64(cap(next))-old) {
					return buf, false, true, nil
				}
			}
			buf = next
		}
		n, rerr := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return buf, false, false, rerr
		}
	}
	return buf, int64(len(buf)) > limit, false, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// growSteps keeps the buffers a body with a declared length passes through
// on its way to its whole one (firstChunk, then four times as much each
// step): every 1 MB body would otherwise leave about 0.7 MB of them to the
// garbage collector. Only these exact sizes are kept, in a sync.Pool each,
// which the collector empties when they go unused.
var growSteps stepPools

const growStepCount = 5 // firstChunk << 0, 2, …, 8: 32 KiB to 8 MiB

type stepPools [growStepCount]sync.Pool

// step is the index of the pool of capacity n, or -1.
func (p *stepPools) step(n int64) int {
	for i := range growStepCount {
		if n == firstChunk<<(2*i) {
			return i
		}
	}
	return -1
}

func (p *stepPools) get(n int64) []byte {
	if i := p.step(n); i >= 0 {
		if b, ok := p[i].Get().(*[]byte); ok {
			return (*b)[:0]
		}
	}
	return make([]byte, 0, n)
}

func (p *stepPools) put(b []byte) {
	if i := p.step(int64(cap(b))); i >= 0 {
		b = b[:0]
		p[i].Put(&b)
	}
}
