package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
)

// One outcome record per socket message. Each response.create the client
// sends, compiled or passed on, is one exchange (flow.go) whose outcome
// (outcome.go) carries websocket=true; it is settled when the provider's
// terminal event for it arrives: the usage of response.completed (read by
// the Responses reader, as an HTTP stream's), the lineage committed on
// response.completed, and then, as for an HTTP request, the metrics, the
// ledger record (so the savings and holdout reports count socket traffic)
// and the log line "websocket message", which carries no content. A
// message the socket's close leaves unanswered is settled then, with
// outcome=closed.

// wsMessage is one response.create on its way through the socket.
type wsMessage struct {
	ex     *exchange
	sent   time.Time       // when it was handed to the relay
	respID string          // the provider's response id, once response.created names it
	conv   artifact.Digest // its conversation key: its own, or its chain's
	prev   string          // previous_response_id, "" for a turn's opening
	loop   *wsLoop         // the recovery loop its provider messages go to (websocket_recovery.go); nil: none

	chainTool wsChainTool    // what its chain says of the tool (websocket_chain_tool.go)
	enforced  bool           // compiled in enforce mode, in the treatment arm
	warmUp    bool           // generate:false: the provider caches its prefix and answers no output
	chained   wsChain        // its chain's state once it is sent, for its continuations
	node      compiler.Chain // the lineage node its compile names (websocket_lineage.go)
	// heldInline is what its chain holds inline (websocket_lease.go).
	heldInline []artifact.Digest
	completed  []byte // its response.completed message while settle reads it
}

// wsHead is what the relay reads of a message: its type, the response a
// client message continues, and the response a provider event is about.
type wsHead struct {
	Type     string `json:"type"`
	Model    string `json:"model"`
	Previous string `json:"previous_response_id"`
	Generate *bool  `json:"generate"` // false: a warm-up, answered with no output
	Response struct {
		ID string `json:"id"`
	} `json:"response"`
	Status int `json:"status"` // an error event's HTTP status, when it names one
}

// begin starts the outcome record of a response.create: the tenant, when
// the verified set admits it, and the message's bytes.
func (s *wsSession) begin(head wsHead, msg []byte) *wsMessage {
	ex := &exchange{start: time.Now(), out: outcome{format: wsCompiledFormat, path: s.path, websocket: true,
		rawBytes: int64(len(msg)), sentBytes: int64(len(msg))}}
	return &wsMessage{ex: ex, prev: head.Previous, warmUp: head.Generate != nil && !*head.Generate}
}

// verified is the socket's tenant if the verified set admits it now (the
// handshake's answer may have verified it since the socket opened), else
// "" and why not.
func (s *wsSession) verified() (string, compiler.Reason, string) {
	if g := s.h.Gate; g != nil {
		if ok, why, detail := g.check(s.ctx, s.scope.Tenant); !ok {
			return "", why, detail
		}
	}
	return s.scope.Tenant, "", ""
}

// compileMessage compiles one response.create under its reservation and
// its conversation's arm, and notes the result in its outcome. out is the
// rewrite to forward, nil for the message as it came.
func (s *wsSession) compileMessage(m *wsMessage, msg []byte, held *reservation) (out []byte, res compiler.Result) {
	g, o := s.h, &m.ex.out
	res = compiler.Result{Decision: compiler.Passthrough, RawBytes: len(msg), SentBytes: len(msg)}
	tenant, why, detail := s.verified()
	if tenant == "" {
		if held != nil {
			held.endWork()
		}
		o.passthrough(why)
		o.detail = detail
		return nil, res
	}
	o.tenant = tenant
	if s.waiting() >= wsQueueMax {
		if held != nil {
			held.endWork()
		}
		o.passthrough(ReasonBusy)
		o.detail = "too many messages awaiting the provider's answers"
		return nil, res
	}
	if held != nil && !held.admitWork(len(msg)) {
		o.passthrough(ReasonBusy)
		o.detail = "no room in max_buffered_bytes for the compile's working memory"
		return nil, res
	}
	end := func() {
		if held != nil {
			held.endWork()
		}
	}
	mode := g.labelMode(tenant)
	if mode == compiler.ModeOff {
		end()
		o.passthrough(compiler.ReasonOff)
		return nil, res
	}
	req := compiler.Request{Path: s.path, Scope: s.scope, Mode: mode, DeferCommit: true, KeyID: s.keyID,
		MinArtifactChars: g.labelMinArtifactChars(tenant), Chained: true}
	chain, inherited := s.chain(m.prev)
	if inherited && chain.node.Continued() {
		node := chain.node
		req.Continues = &node // websocket_lineage.go
	}
	m.heldInline = heldInline(chain, inherited)
	req.HeldInline = m.heldInline // websocket_lease.go
	m.chainTool = wsChainTool{inherited: inherited && !chain.warmUp, tool: chain.tool, held: chain.held, n: chain.n, last: chain.last, reach: chain.reach}
	if !s.armMessage(m, &req, chain, inherited) {
		end()
		o.conversation = g.conversationID(tenant, m.conv)
		g.settleHoldout(m.ex, compiler.Result{Reason: compiler.ReasonHoldout, Conversation: m.conv}, msg)
		return nil, res
	}
	req.Body = append([]byte(nil), msg...) // the relay reuses msg
	res = s.runCompile(m, req, end)
	m.node = res.Chain
	if inherited {
		res.Conversation = m.conv
	}
	m.conv = res.Conversation
	return s.applyMessage(m, res, req.Body, mode)
}

// armMessage sets the request's holdout: a turn's opening (or a
// continuation of a response this socket does not know) is assigned by
// its own conversation key, as an HTTP request; a continuation inherits
// the arm of the conversation its chain belongs to, decided here, since
// its own items do not hold the conversation's opening. false: the
// message is in the control arm and its shadow compile is shed.
func (s *wsSession) armMessage(m *wsMessage, req *compiler.Request, chain wsChain, inherited bool) bool {
	hook := s.h.holdoutHook(m.ex, s.scope.Tenant, req.Mode, s.h.Slots.full())
	if !inherited {
		req.Holdout = hook
		return true
	}
	m.conv = chain.conv
	if hook != nil {
		req.Mode = hook(chain.conv)
	}
	return req.Mode != compiler.ModeOff
}

// runCompile waits for a compile slot within compile_timeout and
// compiles; end returns the working memory's reservation when the
// compile stops.
func (s *wsSession) runCompile(m *wsMessage, req compiler.Request, end func()) compiler.Result {
	g := s.h
	ctx, cancel := context.WithTimeout(s.ctx, g.CompileTimeout)
	defer cancel()
	queued := time.Now()
	// The lineage of the tenant's answers already sent over HTTP
	// (pending.go), as for an HTTP compile.
	g.promises().wait(ctx, req.Scope.Tenant)
	slot, acquired := g.Slots.acquire(ctx)
	m.ex.out.queue = time.Since(queued)
	if !acquired {
		end()
		res := compiler.Result{Decision: compiler.Passthrough, Reason: ReasonBusy, RawBytes: len(req.Body), SentBytes: len(req.Body)}
		if errors.Is(s.ctx.Err(), context.Canceled) {
			res.Reason = ReasonClientAbort
		}
		return res
	}
	// As on HTTPS, a compile abandoned at compile_timeout keeps its slot
	// and its working memory until its work stops (Request.Done).
	stopped := sync.OnceFunc(func() { end(); slot() })
	req.Done = stopped
	res := g.compile(ctx, req)
	if res.Reason != compiler.ReasonTimeout {
		stopped()
	}
	return res
}

// applyMessage decides what goes on (the rewrite in enforce mode when
// the gate accepted it and the conversation is not held out) and notes
// the result in the message's outcome, as applyResult does for HTTP.
func (s *wsSession) applyMessage(m *wsMessage, res compiler.Result, body []byte, mode compiler.Mode) ([]byte, compiler.Result) {
	g, ex := s.h, m.ex
	var out []byte
	m.enforced = mode == compiler.ModeEnforce && !ex.out.hold.control()
	if mode == compiler.ModeEnforce && res.Decision == compiler.Accepted && res.Body != nil && !ex.out.hold.control() {
		out = res.Body
		s.onForwarded(g.holdRewrite(len(out)))
	}
	ex.commit = res.Commit
	if g.Observe != nil {
		ex.observe = func(u provider.Usage) { g.Observe(res, u) }
	}
	sent := len(body)
	if out != nil {
		sent = len(out)
	}
	ex.out.fromResult(res, int64(len(body)), int64(sent), mode)
	ex.out.conversation = g.conversationID(s.scope.Tenant, res.Conversation)
	g.settleHoldout(ex, res, body)
	return out, res
}

// declineMessage notes that the rewrite was not forwarded after all: the
// message goes on as it came, for reason.
func (s *wsSession) declineMessage(m *wsMessage, reason compiler.Reason) {
	o := &m.ex.out
	o.decision, o.reason, o.chainTool = compiler.Passthrough, reason, false
	o.sentBytes, o.receipts, o.folded = o.rawBytes, 0, 0
	o.costSent, o.costHorizonSent = o.costRaw, o.costHorizonRaw
	m.ex.commit = nil
}

// queueMessage queues the message for the provider's answer; on a socket
// already closed it is settled at once.
func (s *wsSession) queueMessage(m *wsMessage) {
	m.sent = time.Now()
	if !s.enqueue(m) {
		s.settle(m, 0, "closed", nil)
	}
}

// passedUnread notes a message the relay sent on without reading it
// whole (over max_body_size, or no room to hold it): if it is a
// response.create, it is one pass-through the provider will answer.
func (s *wsSession) passedUnread(prefix []byte, over bool) {
	if leadingType(prefix) != "response.create" {
		return
	}
	m := s.begin(wsHead{}, nil)
	m.ex.out.rawBytes, m.ex.out.sentBytes = -1, -1 // not read whole: its size is unknown here
	if tenant, _, _ := s.verified(); tenant != "" {
		m.ex.out.tenant = tenant
	}
	reason := ReasonBusy
	if over {
		reason = ReasonTooLarge
	}
	m.ex.out.passthrough(reason)
	s.queueMessage(m)
}

// leadingType is the "type" member of a JSON object's start, when it
// comes before anything the prefix cuts off; "" otherwise.
func leadingType(prefix []byte) string {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return ""
		}
		if k == "type" {
			var v string
			if dec.Decode(&v) != nil {
				return ""
			}
			return v
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return ""
		}
	}
	return ""
}

// providerEvent reads one provider message for the state it settles.
func (s *wsSession) providerEvent(head wsHead, msg []byte) {
	switch head.Type {
	case "response.created":
		if head.Response.ID != "" {
			s.named(head.Response.ID)
		}
		return
	case "response.completed", "response.failed", "response.incomplete", "error":
	default:
		return
	}
	m := s.dequeue(head.Response.ID)
	if m == nil {
		return
	}
	if m.respID == "" {
		m.respID = head.Response.ID
	}
	status, outcome := http.StatusOK, ""
	switch head.Type {
	case "error":
		status, outcome = head.Status, "error"
	case "response.failed", "response.incomplete":
		outcome = head.Type[len("response."):]
	}
	var rd responseReader // nil for an error event: no usage
	if head.Type != "error" {
		r := response.NewReader(provider.Responses, response.Options{Stream: true})
		r.WriteEvent(head.Type, msg)
		rd = r
	}
	if head.Type == "response.completed" {
		m.completed = msg // read by settle only (the relay reuses msg)
	}
	s.settle(m, status, outcome, rd)
	m.completed = nil
}

// settle completes a message's outcome with the provider's answer: its
// usage, the lineage committed when it completed, the chain remembered
// for its continuations; then it is accounted and logged, once.
func (s *wsSession) settle(m *wsMessage, status int, outcome string, rd responseReader) {
	ex, o := m.ex, &m.ex.out
	o.status, o.written, o.outcome = status, status, outcome
	if !m.sent.IsZero() {
		o.upstream = time.Since(m.sent)
	}
	if rd != nil {
		ex.observeUsage(rd)
	}
	switch {
	case outcome == "" && ex.commit != nil:
		commit(ex)
	case ex.commit != nil && s.h.Stats != nil:
		s.h.Stats.Uncommitted.Add(1)
	}
	if m.respID != "" && m.conv != (artifact.Digest{}) {
		c := m.chained
		c.conv = m.conv
		c.node = continuedNode(m, o.committed)
		s.remember(m.respID, c)
	}
	o.total = time.Since(ex.start)
	s.h.account(ex)
	s.h.Logger.Info("websocket message", o.fields()...)
}

// closeSocket settles what the provider never answered and returns the
// socket's reservations.
func (s *wsSession) closeSocket() {
	for _, m := range s.drain() {
		s.mu.Lock()
		l := m.loop
		s.mu.Unlock()
		if l != nil {
			l.held.release() // its buffers (websocket_admit.go)
		}
		s.settle(m, 0, "closed", nil)
	}
	s.releaseAll()
}
