package gateway

import (
	"context"
	"sync/atomic"
)

// Memory admission. max_buffered_bytes bounds what the handler holds at
// once; the body alone is only part of it: compiling a body parses it into
// a node tree, builds up to three plans, splices the rewrite, re-parses it
// for the validity check and counts both bodies' tokens, several times the
// body's size. So a candidate also reserves its compile's working memory,
// compileWorkFactor times its body.
//
// The body is reserved as it arrives, never for what its Content-Length
// declares: the buffer grows with the bytes received (body.go), so a
// client holds what it sent, and an idle socket declaring 32 MiB holds one
// small buffer. Bodies being read share at most 1/(1+compileWorkFactor) of
// the budget (readShare); the working memory is reserved when the body is
// whole, before the wait for a compile slot, and a body for which there is
// no room then goes upstream uncompiled (passthrough=busy). The share
// keeps bodies still arriving from filling the budget, so that a body that
// completes finds room for its working memory: were reading bodies allowed
// the whole budget, a burst of large ones could leave none for any compile.
// A candidate that waits for a slot holds its working memory's
// reservation, so the slot, when it comes, is used, and the queue is
// capped at what the budget can compile. body_read_timeout (default 30s) bounds how
// long a slow client holds what it sent.

// compileWorkFactor is a compile's peak working memory (live heap, beyond
// the body itself) as a multiple of its body's size, rounded up;
// TestCompileMemoryAdmitted fails when a compile outgrows it.
const compileWorkFactor = 4

// A reservation is one candidate's share of max_buffered_bytes: the
// capacity of its body buffer and its compile's working memory. The body's
// share is taken while the body is read (one goroutine), within the
// reading share; the working memory's share is taken by admitWork when the
// body is whole and returned by endWork when the compile stops or is not
// run, which may be on the compile's goroutine after the handler moved on.
type reservation struct {
	budget  *atomic.Int64
	reading *atomic.Int64 // the bytes of bodies being read
	max     int64
	readMax int64        // the reading share of max
	factor  int64        // compileWorkFactor, or 0 for a candidate that will not be compiled
	body    int64        // bytes of body buffer reserved; read-side only
	inRead  int64        // of body, what still counts in reading
	work    atomic.Int64 // bytes of working memory still reserved
}

// readShare is the part of max_buffered_bytes bodies being read may hold.
func readShare(max int64) int64 { return max / (1 + compileWorkFactor) }

// reserve starts a candidate's reservation; compiles is false when it is
// known from the headers that the body will only be forwarded (no tenant,
// no vault), so that it reserves no working memory.
func (g *Gateway) reserve(compiles bool) *reservation {
	r := &reservation{budget: g.Buffered, reading: g.Reading, max: g.MaxBufferedBytes, readMax: readShare(g.MaxBufferedBytes)}
	if compiles {
		r.factor = compileWorkFactor
	}
	return r
}

// grow reserves n more bytes of body buffer, or nothing when they do not
// fit the reading share or the budget.
func (r *reservation) grow(n int64) bool {
	if r.reading.Add(n) > r.readMax {
		r.reading.Add(-n)
		return false
	}
	if r.budget.Add(n) > r.max {
		r.budget.Add(-n)
		r.reading.Add(-n)
		return false
	}
	r.body += n
	r.inRead += n
	return true
}

// doneReading leaves the reading share: the body is whole, or its reading
// stopped. The body stays counted in the budget until release.
func (r *reservation) doneReading() {
	r.reading.Add(-r.inRead)
	r.inRead = 0
}

// admitWork reserves the working memory of compiling an n-byte body,
// false when it does not fit. Called on the reading goroutine, once.
func (r *reservation) admitWork(n int) bool {
	work := int64(n) * r.factor
	if work == 0 {
		return true
	}
	if r.budget.Add(work) > r.max {
		r.budget.Add(-work)
		return false
	}
	r.work.Store(work)
	return true
}

// endWork returns the working memory's share; later calls do nothing.
func (r *reservation) endWork() {
	if n := r.work.Swap(0); n != 0 {
		r.budget.Add(-n)
	}
}

// release returns the body's share. It is due when the upstream is done
// with the body; the working memory's share is endWork's, which a compile
// abandoned at compile_timeout calls when it stops, maybe later.
func (r *reservation) release() {
	r.doneReading()
	r.budget.Add(-r.body)
	r.body = 0
}

// holdRewrite keeps a rewrite's bytes counted while the upstream reads it
// (the original body stays held too); the returned release is due with the
// body's. It is taken as the compile returns; until then the rewrite was
// the compile's working memory, returned when the compile said it stopped
// (Request.Done), an instant before.
func (g *Gateway) holdRewrite(n int) (release func()) {
	g.Buffered.Add(int64(n))
	return func() { g.Buffered.Add(-int64(n)) }
}

// Compile slots. A compile is CPU work: parsing, hashing, counting tokens.
// More compiles at once than the process has cores finish no sooner in
// total, and every one of them holds its working memory (compileWorkFactor
// times its body) for as long as the slowest; with as many slots as cores
// the first ones are not slowed down by the last (docs/benchmarks.md has
// the concurrent figures). So at most max_concurrent_compiles compile at
// once; the others
// wait, holding only their bodies, for a slot within compile_timeout, and
// go upstream uncompiled (passthrough=busy) if none comes.

// CompileSlots is a counting semaphore of compiles; nil means no limit.
type CompileSlots chan struct{}

func NewCompileSlots(n int) CompileSlots { return make(CompileSlots, n) }

// acquire waits for a slot until ctx ends. release returns it; it is due
// when the compile stops, which for one abandoned at compile_timeout is
// after the handler has moved on.
func (s CompileSlots) acquire(ctx context.Context) (release func(), ok bool) {
	if s == nil {
		return func() {}, true
	}
	select {
	case s <- struct{}{}:
		return func() { <-s }, true
	default:
	}
	select {
	case s <- struct{}{}:
		return func() { <-s }, true
	case <-ctx.Done():
		return nil, false
	}
}
