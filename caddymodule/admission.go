package caddymodule

import (
	"context"
	"sync/atomic"
)

// Memory admission. max_buffered_bytes bounds what the handler holds at
// once; the body alone is only part of it: compiling a body parses it into
// a node tree, builds up to three plans, splices the rewrite, re-parses it
// for the validity check and counts both bodies' tokens. Admitting only the
// bodies let 8 concurrent 30 MB compiles reach 1.6 GB against a 256 MiB
// bound. So a candidate also reserves its compile's working memory,
// compileWorkFactor times its body, and it does so at the door, with the
// body, in one step: a body for which there is no room for both streams
// through uncompiled (passthrough=busy) at once.
//
// Reserving the working memory later, when the compile starts, starved
// compiles under a burst: bodies waiting for a compile slot filled the
// budget, every slot holder then found no room for its working memory and
// passed through, and handed its slot on while its body was still held, so
// the next one found none either. Sixteen concurrent 9 MB candidates under
// 96 MiB all went upstream uncompiled (TestCompileMemoryAdmitted, in CI). A
// candidate that waits for a slot now holds the reservation of memory it
// does not use yet; that is what guarantees it can compile when its turn
// comes, and it caps the queue at what the budget can compile. The price:
// a body that arrives slowly holds the whole reservation while it does
// (body_read_timeout bounds that). Reserving the working memory once the
// body is whole, before the slot wait, also ends the slot-wait starvation,
// and measured no worse on bursts; it was not kept because bodies still
// arriving could then hold the whole budget, so that none that completes
// finds room, where a candidate admitted at the door always compiles.

// compileWorkFactor is a compile's peak working memory (live heap, beyond
// the body itself) as a multiple of its body's size, measured with
// TestCompileMemoryAdmitted on large chat histories, rounded up.
const compileWorkFactor = 4

// A reservation is one candidate's share of max_buffered_bytes: the
// capacity of its body buffer and its compile's working memory. The body's
// share is taken while the body is read (one goroutine); the working
// memory's share is returned by endWork when the compile stops or is not
// run, which may be on the compile's goroutine after the handler moved on.
type reservation struct {
	budget *atomic.Int64
	max    int64
	factor int64        // compileWorkFactor, or 0 for a candidate that will not be compiled
	body   int64        // bytes of body buffer reserved; read-side only
	work   atomic.Int64 // bytes of working memory still reserved
}

// reserve starts a candidate's reservation; compiles is false when it is
// known from the headers that the body will only be forwarded (no tenant,
// no vault), so that it reserves no working memory.
func (h *Handler) reserve(compiles bool) *reservation {
	r := &reservation{budget: h.buffered, max: *h.MaxBufferedBytes}
	if compiles {
		r.factor = compileWorkFactor
	}
	return r
}

// grow reserves n more bytes of body buffer and the working memory of
// compiling them, or nothing when both do not fit.
func (r *reservation) grow(n int64) bool {
	work := n * r.factor
	if r.budget.Add(n+work) > r.max {
		r.budget.Add(-n - work)
		return false
	}
	r.body += n
	r.work.Add(work)
	return true
}

// fit sets the working memory to that of compiling an n-byte body: a
// buffer grown by doubling, or sized by a longer declared length, reserved
// it for its capacity. Called on the reading goroutine, before the compile.
func (r *reservation) fit(n int) {
	work := int64(n) * r.factor
	if d := r.work.Load() - work; d > 0 {
		r.work.Add(-d)
		r.budget.Add(-d)
	}
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
	r.budget.Add(-r.body)
	r.body = 0
}

// holdRewrite keeps a rewrite's bytes counted while the upstream reads it
// (the original body stays held too); the returned release is due with the
// body's. It is taken as the compile returns; until then the rewrite was
// the compile's working memory, returned when the compile said it stopped
// (Request.Done), an instant before.
func (h *Handler) holdRewrite(n int) (release func()) {
	h.buffered.Add(int64(n))
	return func() { h.buffered.Add(-int64(n)) }
}

// Compile slots. A compile is CPU work: parsing, hashing, counting tokens.
// More compiles at once than the process has cores finish no sooner in
// total, and every one of them holds its working memory (compileWorkFactor
// times its body) for as long as the slowest. Sixteen concurrent cold 1 MB
// compiles on two cores peaked at 113-126 MB of Go heap unlimited and
// 96-97 MB with two slots (BenchmarkGateway16x1MB/cold), and finished
// sooner in the median, because the first ones were not slowed down by the
// last. So at most max_concurrent_compiles compile at once; the others
// wait, holding only their bodies, for a slot within compile_timeout, and
// go upstream uncompiled (passthrough=busy) if none comes.

// compileSlots is a counting semaphore of compiles; nil means no limit.
type compileSlots chan struct{}

func newCompileSlots(n int) compileSlots { return make(compileSlots, n) }

// acquire waits for a slot until ctx ends. release returns it; it is due
// when the compile stops, which for one abandoned at compile_timeout is
// after the handler has moved on.
func (s compileSlots) acquire(ctx context.Context) (release func(), ok bool) {
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
