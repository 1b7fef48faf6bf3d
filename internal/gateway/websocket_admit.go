package gateway

import (
	"sync"
	"sync/atomic"
)

// Memory admission of the socket's messages (admission.go). A text
// message the relay holds until it is whole is reserved as it arrives,
// within the reading share, as an HTTP body is (wsSession.admit, the
// relay's Admit): its frames as sent and its payload unmasked. A
// response.create, once whole, also reserves its compile's working memory
// and the compile's copy of it (compileWorkFactor+1 times its size) before
// it waits for a compile slot. A message that gets no reservation goes on
// as it came (passthrough=busy), so nothing waits for room. What a message
// reserved is returned when its bytes have been handed on to the provider
// (wsSession.forwarded, from the relay's reads); the working memory when
// its compile stops.

// wsWorkFactor is a message's compile memory beyond what the relay holds:
// the compile's copy of the message and its working memory.
const wsWorkFactor = compileWorkFactor + 1

// admit reserves n more bytes for the message being held; false sends it
// on as it comes. Called on the relay's reading goroutine.
func (s *wsSession) admit(n int64) bool {
	s.amu.Lock()
	defer s.amu.Unlock()
	if s.held == nil {
		s.held = s.h.reserve(true)
		s.held.factor = wsWorkFactor
	}
	return s.held.grow(n)
}

// takeHeld ends the held message's reading: its reservation (nil when the
// relay asks none) is released once the message has been handed on.
func (s *wsSession) takeHeld() *reservation {
	s.amu.Lock()
	defer s.amu.Unlock()
	r := s.held
	s.held = nil
	if r != nil {
		r.doneReading()
		s.due = append(s.due, r.release)
	}
	return r
}

// onForwarded queues a release due once the bytes the relay has decided
// on are handed on.
func (s *wsSession) onForwarded(release func()) {
	s.amu.Lock()
	s.due = append(s.due, release)
	s.amu.Unlock()
}

// forwarded runs the releases due: the relay has handed on everything it
// had decided on. Called on the relay's reading goroutine.
func (s *wsSession) forwarded() {
	s.amu.Lock()
	due := s.due
	s.due = nil
	s.amu.Unlock()
	for _, f := range due {
		f()
	}
}

// releaseAll returns every reservation of a socket that closed.
func (s *wsSession) releaseAll() {
	s.amu.Lock()
	if r := s.held; r != nil {
		s.held = nil
		s.due = append(s.due, r.release)
	}
	s.amu.Unlock()
	s.forwarded()
}

// The recovery loop's buffers (websocket_recovery.go) count in
// max_buffered_bytes for the loop's whole life: each provider message it
// takes (wsStitchFactor times its size) and each follow-up body. A
// message or follow-up that finds no room ends the loop: the client's
// response is ended well formed from the last complete round, as when a
// follow-up is refused (websocket_recovery_fail.go).

// wsStitchFactor is what a loop reserves per provider message, as a
// multiple of its size: the stitcher keeps an event it holds (a call's,
// a round's end, a finished item) as its data and its SSE form. Every
// message counts, those passed straight on too: a bound from above that
// needs no reading of the stitcher's state.
const wsStitchFactor = 2

// loopHeld counts one loop's buffers in max_buffered_bytes until release;
// after release it takes nothing more. The loop takes under the relay's
// write lock; the socket's close may release at the same time.
type loopHeld struct {
	mu     sync.Mutex
	budget *atomic.Int64
	max    int64
	n      int64
	done   bool
}

func (g *Gateway) loopHeld() *loopHeld {
	return &loopHeld{budget: g.Buffered, max: g.MaxBufferedBytes}
}

// take counts n more bytes, false (nothing counted) when they do not fit.
func (h *loopHeld) take(n int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return false
	}
	if h.budget.Add(n) > h.max {
		h.budget.Add(-n)
		return false
	}
	h.n += n
	return true
}

// release returns what the loop holds; later calls do nothing.
func (h *loopHeld) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.budget.Add(-h.n)
	h.n, h.done = 0, true
}
