package gateway

import (
	"bytes"
	"io"
	"math/bits"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
)

// bodyBuffer is the one owner of a candidate's body bytes, from the read to
// their return to the free list. The buffer is half of what a warm request
// allocates, but its readers can outlive the handler: reverse_proxy's
// transport writes the body in a goroutine of its own that may still run
// when the answer is back (and rewinds it through GetBody), and a compile
// abandoned at compile_timeout reads it until it stops. So every reader
// holds a reference, and the bytes go back to the free list only when the
// last one is dropped: the handler's own when it returns, the compile's at
// compiler.Request.Done, and each body reader's at its EOF or Close. A
// reference is only ever taken from a live one (tryHold), so a buffer never
// comes back to life once released. A reader that is never closed keeps its
// buffer from the list, and the garbage collector takes it: a missed reuse
// costs an allocation, an early one would corrupt a request.
//
// The token counter's workers, which finish past its budget what a count
// left, hold one too (compiler.Request.Hold), until the last of them is
// done. Its backlog (16 MB) bounds the bytes they have yet to read, not the
// buffers they keep: a small miss keeps its whole body, outside
// max_buffered_bytes once the handler returned, until the workers drain
// it (a piece takes a millisecond or less). Of what the compiler hands
// back, Result.Commit and Result.Recovered hold the plan, whose texts view
// the body: the handler runs them before it drops its own reference. What the
// compiler keeps beyond Compile (its caches, the lineage record, the usage
// notes) holds digests, counts and copied strings. The compile's parse
// trees (compiler.Scratch) live in the pooled memory beside the bytes they
// describe, from which the texts can decode, and are reset with them; they
// count in max_buffered_bytes until then.
type bodyBuffer struct {
	b    []byte // the body
	mem  *pooled
	refs atomic.Int64
	// The compile's trees, counted in max_buffered_bytes until the last
	// release (holdScratch).
	trees   int64
	counted *atomic.Int64
}

// pooled is a size class's buffer, in use or on the free list, with the
// compile scratch (parse trees) that goes with it: the trees describe the
// body, and the plan that Result.Commit and Recovered hold can decode from
// them as from the body, so they share its lifetime and are reset when it
// goes back to the list.
type pooled struct {
	b       []byte // full capacity of its class
	class   int
	scratch compiler.Scratch
}

// Size classes: eight per doubling, from 64 KiB to 2 MiB, so a buffer is at
// most an eighth larger than its body. Smaller bodies cost little to
// allocate; larger ones are not kept around.
const (
	poolMinShift    = 16
	poolMaxShift    = 21
	classesPerShift = 8
	// maxFreeBytes bounds the buffers kept free, all classes together. A
	// free buffer is live heap and raises the collector's goal twice over,
	// so a larger list costs peak memory under a burst. Two buffers of the
	// largest class serve a request stream that follows one body with the
	// next (the hot path): the client has its answer before the handler
	// is done with the body (the lineage record and the log line come
	// after the flush, response.go), so its next body is often read while
	// the last one is still held. A burst of concurrent bodies allocates
	// the rest, as it would without the list.
	maxFreeBytes = 4 << 20
)

// freeBodies holds the free buffers, by class, within maxFreeBytes.
var freeBodies struct {
	mu    sync.Mutex
	lists [(poolMaxShift - poolMinShift) * classesPerShift][]*pooled
	bytes int64
}

func getFree(class int) *pooled {
	freeBodies.mu.Lock()
	defer freeBodies.mu.Unlock()
	l := freeBodies.lists[class]
	if len(l) == 0 {
		return nil
	}
	v := l[len(l)-1]
	l[len(l)-1] = nil
	freeBodies.lists[class] = l[:len(l)-1]
	freeBodies.bytes -= int64(cap(v.b))
	return v
}

// putFree keeps v if there is room; otherwise the collector takes it.
func putFree(v *pooled) {
	freeBodies.mu.Lock()
	defer freeBodies.mu.Unlock()
	if freeBodies.bytes+int64(cap(v.b)) > maxFreeBytes {
		return
	}
	freeBodies.lists[v.class] = append(freeBodies.lists[v.class], v)
	freeBodies.bytes += int64(cap(v.b))
}

// poisonReleased fills every released buffer, so a use after release
// shows as bytes no valid body has (0xFF is never in UTF-8). Tests turn it
// on: this package's directly, the integration suite through
// TT_TEST_POISON_BODIES=1 (its harness sets it, except when benchmarking,
// where it would add a pass over every body). The production binary never
// pays for it and links no testing code.
var (
	poisonReleased atomic.Bool
	poisonFromEnv  sync.Once
)

func poisoning() bool {
	poisonFromEnv.Do(func() {
		if os.Getenv("TT_TEST_POISON_BODIES") == "1" {
			poisonReleased.Store(true)
		}
	})
	return poisonReleased.Load()
}

// poisonByte is what a released buffer holds in test binaries.
const poisonByte = 0xFF

// bodyClass returns the size class for a buffer of n bytes and its
// capacity; class -1 for sizes that are not pooled.
func bodyClass(n int64) (class int, size int64) {
	if n <= 1<<poolMinShift || n > 1<<poolMaxShift {
		return -1, n
	}
	k := bits.Len64(uint64(n-1)) - 1 // 2^k < n <= 2^(k+1)
	step := int64(1) << (k - 3)
	j := (n - 1<<k + step - 1) / step // 1..8
	return (k-poolMinShift)*classesPerShift + int(j) - 1, 1<<k + j*step
}

// newBodyBuffer returns an empty buffer with room for size bytes, from its
// size class's free list when it has one, held once (by the handler).
func newBodyBuffer(size int64) *bodyBuffer {
	o := &bodyBuffer{}
	o.refs.Store(1)
	class, capacity := bodyClass(size)
	if class < 0 {
		o.b = make([]byte, 0, size)
		return o
	}
	if v := getFree(class); v != nil {
		o.mem = v
	} else {
		o.mem = &pooled{b: make([]byte, capacity), class: class}
	}
	o.b = o.mem.b[:0]
	return o
}

// scratch returns the compile scratch of the buffer's memory, nil when
// the buffer is not pooled.
func (o *bodyBuffer) scratch() *compiler.Scratch {
	if o == nil || o.mem == nil {
		return nil
	}
	return &o.mem.scratch
}

// holdScratch counts the memory of the compile's trees in counted until
// the buffer's last release, when they are reset: the compile's own
// reservation ends when it stops, and the trees outlive it with the body.
// It is called once, by a holder, when the compile has stopped.
func (o *bodyBuffer) holdScratch(counted *atomic.Int64) {
	n := int64(o.scratch().Bytes())
	if n == 0 {
		return
	}
	counted.Add(n)
	o.trees, o.counted = n, counted
}

// keep takes buf (what was read into the buffer) as the body. A buffer
// that had to grow past its class (a body longer than its declared
// length) is a new array: the pooled one is let go.
func (o *bodyBuffer) keep(buf []byte) {
	if o.mem != nil && (cap(buf) == 0 || unsafe.SliceData(buf) != unsafe.SliceData(o.mem.b)) {
		o.mem = nil
	}
	o.b = buf
}

// abandon keeps the buffer from its pool for good: for bodies handed on
// through readers that take no reference (a partly read body streamed
// through).
func (o *bodyBuffer) abandon() { o.mem = nil }

// owns reports whether b lies inside the buffer's array.
func (o *bodyBuffer) owns(b []byte) bool {
	if o == nil || cap(o.b) == 0 || len(b) == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(o.b)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= start && p < start+uintptr(cap(o.b))
}

// tryHold takes one more reference if the buffer is still held; ok is
// false once it was released (then it must not be read).
func (o *bodyBuffer) tryHold() (release func(), ok bool) {
	for {
		n := o.refs.Load()
		if n <= 0 {
			return nil, false
		}
		if o.refs.CompareAndSwap(n, n+1) {
			return sync.OnceFunc(o.release), true
		}
	}
}

// release drops one reference; the last one returns the buffer.
func (o *bodyBuffer) release() {
	n := o.refs.Add(-1)
	if n > 0 {
		return
	}
	if n < 0 {
		panic("caddymodule: body buffer released more often than held")
	}
	if o.counted != nil {
		o.counted.Add(-o.trees)
	}
	mem := o.mem
	o.mem = nil
	if mem == nil {
		return
	}
	// A free buffer keeps trees' memory for at most half its size: an odd
	// body of many tiny values should not stay in memory after it.
	keep := cap(mem.b) / 2
	if poisoning() {
		fillPoison(mem.b)
		mem.scratch.ResetPoisoned(keep)
	} else {
		mem.scratch.Reset(keep)
	}
	putFree(mem)
}

func fillPoison(b []byte) {
	if len(b) == 0 {
		return
	}
	b[0] = poisonByte
	for n := 1; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
}

// reader returns a reader of b (inside the buffer) holding a reference
// until its EOF or Close; ok is false once the buffer was released.
func (o *bodyBuffer) reader(b []byte) (io.ReadCloser, bool) {
	release, ok := o.tryHold()
	if !ok {
		return nil, false
	}
	return &bodyReader{rest: b, release: release}, true
}

// bodyReader reads a held body. Read and Close exclude each other, so a
// transport closing the body while its writer goroutine reads it (HTTP/2
// aborts do) never releases the bytes under a copy.
type bodyReader struct {
	mu      sync.Mutex
	rest    []byte
	release func() // nil once the reference is dropped
	closed  bool
}

func (r *bodyReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if len(r.rest) == 0 {
		r.drop() // nothing more will be read from the buffer
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}

func (r *bodyReader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	r.drop()
	return nil
}

func (r *bodyReader) drop() {
	r.rest = nil
	if r.release != nil {
		r.release()
		r.release = nil
	}
}

// plainBody is a reader of bytes nobody pools.
func plainBody(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }
