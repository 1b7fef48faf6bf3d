package gateway

import (
	"sync"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
)

// Per-socket state. Each response.create forwarded is one wsMessage,
// queued until the provider's terminal event for it settles its outcome
// (websocket_outcome.go). The provider names its response in
// response.created and in the terminal event; a message gets the id of
// the first response.created after it (the provider answers a socket's
// messages in order), and once settled its conversation is remembered by
// that id: a later message continuing it (previous_response_id), which
// carries only the items after it, belongs to the same conversation and
// inherits its holdout arm.

// wsState is the part of wsSession this file and its siblings own.
type wsState struct {
	amu  sync.Mutex   // held, due: the relay's goroutine and Close
	held *reservation // the message the relay is holding (websocket_admit.go)
	due  []func()     // releases due once the relay has handed its bytes on

	// mu (wsSession's) guards what follows.
	queue  []*wsMessage       // forwarded, awaiting their terminal events, in order
	chains map[string]wsChain // by the provider's response id
	order  []string           // chains' keys, oldest first, to bound them
	closed bool
}

// wsChain is what a continuation inherits from the response it names.
type wsChain struct {
	conv  artifact.Digest   // the conversation key (compiler's Result.Conversation)
	tool  bool              // the chain's messages carried the recovery tool (websocket_chain_tool.go)
	held  int               // bytes of the chain's messages sent
	n     int               // the chain's messages sent
	last  time.Time         // when the last of them went out
	reach []artifact.Digest // what the chain's rewrites reached
	// inline is what the provider holds inline in the chain's context,
	// for a continuation's leases (websocket_lease.go).
	inline []artifact.Digest
	// node is the lineage node of the response, continued through its
	// output, for a continuation's record to extend (websocket_lineage.go).
	node compiler.Chain
	// warmUp: the response is a warm-up's (generate:false), which Codex
	// sends before each turn with little of the history; the turn's
	// opening continues it with the whole input, so the tool is decided
	// there, as for an opening.
	warmUp bool
}

// wsChainsMax bounds the responses a socket remembers; a chain longer
// than that is still followed, since each continuation names the newest.
const wsChainsMax = 256

// chain is the state of the response a continuation names.
func (s *wsSession) chain(id string) (wsChain, bool) {
	if id == "" {
		return wsChain{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.chains[id]
	return c, ok
}

// remember keeps a settled response's chain state under its id.
func (s *wsSession) remember(id string, c wsChain) {
	if id == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.chains == nil {
		s.chains = make(map[string]wsChain)
	}
	if _, ok := s.chains[id]; !ok {
		if len(s.order) >= wsChainsMax {
			delete(s.chains, s.order[0])
			s.order = s.order[1:]
		}
		s.order = append(s.order, id)
	}
	s.chains[id] = c
}

// wsQueueMax bounds the compiled messages a socket keeps waiting for the
// provider's answers: each holds its lineage record (the compile's plan)
// until then. Past it a message goes on uncompiled (passthrough=busy).
const wsQueueMax = 64

// waiting is the number of messages awaiting their answers.
func (s *wsSession) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// enqueue queues a message forwarded; false when the socket has closed
// (the message is then settled at once by the caller).
func (s *wsSession) enqueue(m *wsMessage) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.queue = append(s.queue, m)
	return true
}

// named gives the first queued message without a response id the id the
// provider's response.created names.
func (s *wsSession) named(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.queue {
		if m.respID == "" {
			m.respID = id
			return
		}
	}
}

// dequeue takes the message a terminal event settles: the one its
// response id names, else the oldest not yet named (an error before
// response.created), else the oldest.
func (s *wsSession) dequeue(id string) *wsMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := -1
	for i, m := range s.queue {
		if id != "" && m.respID == id {
			at = i
			break
		}
	}
	if at < 0 && id == "" {
		for i, m := range s.queue {
			if m.respID == "" {
				at = i
				break
			}
		}
	}
	if at < 0 && len(s.queue) > 0 {
		at = 0
	}
	if at < 0 {
		return nil
	}
	m := s.queue[at]
	s.queue = append(s.queue[:at], s.queue[at+1:]...)
	return m
}

// drain takes every queued message of a socket that closed.
func (s *wsSession) drain() []*wsMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	q := s.queue
	s.queue = nil
	return q
}
