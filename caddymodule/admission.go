package caddymodule

import "context"

// Memory admission. max_buffered_bytes bounds what the handler holds at
// once; the body alone is only part of it: compiling a body parses it into
// a node tree, builds up to three plans, splices the rewrite, re-parses it
// for the validity check and counts both bodies' tokens. Admitting only the
// bodies let 8 concurrent 30 MB compiles reach 1.6 GB against a 256 MiB
// bound. So a compile also reserves its working memory, compileWorkFactor
// times its body, from the same budget before it starts, and a body for
// which there is no room goes upstream uncompiled (passthrough=busy), as a
// body past the budget already does.

// compileWorkFactor is a compile's peak working memory (live heap, beyond
// the body itself) as a multiple of its body's size, measured with
// TestCompileMemoryAdmitted on large chat histories, rounded up.
const compileWorkFactor = 4

// admitCompile reserves the working memory of compiling an n-byte body
// (the body itself is already held by readBody). ok is false when it does
// not fit under max_buffered_bytes.
func (h *Handler) admitCompile(n int) (done func(), ok bool) {
	work := int64(n) * compileWorkFactor
	if h.buffered.Add(work) > *h.MaxBufferedBytes {
		h.buffered.Add(-work)
		return nil, false
	}
	return func() { h.buffered.Add(-work) }, true
}

// holdRewrite keeps a rewrite's bytes counted while the upstream reads it
// (the original body stays held too); the returned release is due with the
// body's. It is taken before the compile's reservation is returned, so the
// count never drops below what is held.
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
