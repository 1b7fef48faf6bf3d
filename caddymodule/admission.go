package caddymodule

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
