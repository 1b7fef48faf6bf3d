package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"

	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/seal"
	"github.com/tokenterminator/caddy-token-terminator/internal/wsrelay"
)

// The Responses WebSocket (Codex's default transport): GET /v1/responses
// or /backend-api/codex/responses with Upgrade: websocket. reverse_proxy
// makes the upstream handshake and copies the upgraded streams as usual;
// the handler only wraps the client connection reverse_proxy hijacks, so
// upstream selection, TLS, header_up, timeouts and graceful close stay
// reverse_proxy's. On that connection (internal/wsrelay):
//   - client text messages of type response.create are compiled as a
//     Responses body, one compile per message; every other message, and a
//     message declined, unparseable or over max_body_size, goes on as it
//     came, byte for byte and in order;
//   - provider messages pass byte for byte; the lineage of a compiled
//     message is committed on the provider's response.completed, and
//     dropped on response.failed, response.incomplete or error;
//   - the permessage-deflate offer is taken out of the handshake, so no
//     message on the socket is compressed and none has to be re-deflated
//     (a rewrite would otherwise need the sender's compression context);
//   - with the recovery tool, a rewrite that carries it goes out and the
//     tool's loop runs over the socket (websocket_recovery.go);
//   - each response.create is one outcome record (websocket_outcome.go),
//     settled by the provider's terminal event for it (or, for a message
//     whose recovery loop ran, by the loop's end), reserved in
//     max_buffered_bytes while held and compiled (websocket_admit.go),
//     and in its conversation's holdout arm, which a continuation
//     (previous_response_id) inherits (websocket_state.go).

// wsCompiledFormat is the format whose WebSocket messages are compiled.
const wsCompiledFormat = provider.Responses

// webSocket returns the writer an upgrade to a compiled Responses route is
// served with, and false when the socket is only passed through (another
// format, a bypass, no vault, no verified tenant).
func (h *Gateway) webSocket(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, bool) {
	format, ok := h.FormatFor(http.MethodPost, r.URL.Path)
	if !ok || format != wsCompiledFormat || h.VaultErr != "" || h.Tenants == nil || h.Compile == nil || h.bypassed(r) {
		return w, false
	}
	tenant := h.tenant(r, format)
	if tenant == "" {
		return w, false
	}
	// The socket's messages store under the tenant's data keys (seal.go);
	// without them nothing is compiled, as on HTTPS.
	r = h.sealed(r, format)
	keys := seal.FromContext(r.Context())
	if h.encrypting() && keys == nil {
		return w, false
	}
	verified, why := true, compiler.Reason("")
	if h.Gate != nil {
		verified, why, _ = h.Gate.check(r.Context(), tenant)
	}
	r.Header.Del("Sec-WebSocket-Extensions")
	if h.Metrics != nil {
		h.Metrics.upgrades.WithLabelValues(string(format)).Inc()
	}
	h.Logger.Info("websocket relayed; response.create messages are compiled",
		zap.String("format", string(format)), zap.String("path", r.URL.Path), zap.Bool("websocket", true))
	s := &wsSession{h: h, ctx: r.Context(), path: r.URL.Path, scope: artifact.Scope{Tenant: tenant, Session: h.session(r)}, keyID: keyID(keys)}
	return &wsWriter{ResponseWriter: w, s: s, verified: verified, why: why}, true
}

// WriteHeader settles the tenant on the provider's answer to the
// handshake: 101 accepts the credential as a 2xx does on HTTP (a tenant
// that only ever opens sockets is verified by it); 401 or 403 revokes.
func (w *wsWriter) WriteHeader(code int) {
	if g := w.s.h.Gate; g != nil && (code == http.StatusSwitchingProtocols || code == http.StatusUnauthorized || code == http.StatusForbidden) {
		status := code
		if code == http.StatusSwitchingProtocols {
			status = http.StatusOK
		}
		g.settle(w.s.scope.Tenant, w.verified, w.why, status)
	}
	w.ResponseWriter.WriteHeader(code)
}

// wsWriter hands reverse_proxy the relayed client connection on Hijack.
type wsWriter struct {
	http.ResponseWriter
	s        *wsSession
	verified bool            // the tenant was verified when the socket opened
	why      compiler.Reason // why not
}

func (w *wsWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack implements http.Hijacker for reverse_proxy's protocol switch.
func (w *wsWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return conn, brw, err
	}
	var src io.Reader = conn
	if n := brw.Reader.Buffered(); n > 0 { // bytes the server read past the handshake
		b, _ := brw.Reader.Peek(n)
		src = io.MultiReader(bytes.NewReader(bytes.Clone(b)), conn)
	}
	max := w.s.h.MaxBodySize
	rc := &relayConn{Conn: conn, s: w.s}
	rc.rd = wsrelay.NewReader(src, max, w.s.rewrite)
	rc.rd.Admit, rc.rd.Passed = w.s.admit, w.s.passedUnread // websocket_admit.go
	rc.tap = &wsrelay.Tap{W: conn, Max: wsEventMax, On: w.s.providerMessage}
	// The recovery loop (websocket_recovery.go): provider messages of a
	// message that carried the tool are diverted to it, and its follow-ups
	// are injected into the client's stream.
	if rt := w.s.h.Recovery; rt != nil && rt.mode == RecoveryTool {
		rc.rd.EnableInject()
		rc.injecting = true
		rc.tap.Divert, rc.tap.Diverted, rc.tap.Dropped = w.s.divert, w.s.diverted, w.s.droppedMessage
	}
	w.s.rc = rc
	return rc, bufio.NewReadWriter(bufio.NewReader(rc), bufio.NewWriter(rc)), nil
}

// wsEventMax bounds a provider message the tap reads for its type: the
// terminal events carry the whole response, output included. A message
// over it passes as it came, unread; inside a recovery loop it is left
// out instead and ends the loop (websocket_recovery_fail.go).
const wsEventMax = 8 << 20

// relayConn is the client connection with the relay in both directions.
type relayConn struct {
	net.Conn
	rd        *wsrelay.Reader
	tap       *wsrelay.Tap
	injecting bool       // rd injects (the recovery loop's follow-ups)
	mu        sync.Mutex // Write: reverse_proxy's copier, its graceful close and the loop's deadline
	s         *wsSession
	end       sync.Once
}

func (c *relayConn) Read(p []byte) (int, error) {
	n, err := c.rd.Read(p)
	if c.rd.Buffered() == 0 {
		c.s.forwarded() // what the relay decided on is handed on: its reservations go
	}
	return n, err
}

// Close stops the relay's reader with the connection, settles the
// socket's unanswered messages and returns its reservations
// (websocket_outcome.go).
func (c *relayConn) Close() error {
	c.rd.Close()
	err := c.Conn.Close()
	c.end.Do(c.s.closeSocket)
	return err
}

func (c *relayConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tap.Write(p)
}

// wsSession is one relayed socket: its scope and the lineage records of
// its compiled messages, waiting for the provider's answers in order.
type wsSession struct {
	h     *Gateway
	ctx   context.Context
	path  string
	scope artifact.Scope
	keyID func(artifact.Digest) artifact.Digest // Request.KeyID under the socket's data keys (seal.go)

	rc *relayConn // set at the hijack, before the first message

	mu      sync.Mutex
	wsState // websocket_state.go
}

// rewrite compiles one client text message; ok false forwards it as it came.
func (s *wsSession) rewrite(msg []byte) (out []byte, ok bool) {
	held := s.takeHeld() // websocket_admit.go: released once the message is handed on
	var head wsHead
	if json.Unmarshal(msg, &head) != nil || head.Type != "response.create" {
		return nil, false
	}
	m := s.begin(head, msg)
	defer s.queueMessage(m) // websocket_outcome.go: settled by the provider's terminal event
	out, res := s.compileMessage(m, msg, held)
	out, res = s.chainTool(m, msg, out, res, head.Model)  // websocket_chain_tool.go
	defer func() { s.chainSent(m, len(msg), out, res) }() // what it went out as
	if out != nil && res.RecoveryTool {                   // the tool's loop runs over the socket (websocket_recovery.go)
		loop, ok := s.recoveryLoop(m, res, bytes.Clone(msg))
		if !ok {
			s.declineMessage(m, ReasonRecoveryUnavailable)
			out = nil
			return nil, false
		}
		m.loop = loop
	}
	return out, out != nil
}

// providerMessage settles the message a terminal event answers.
func (s *wsSession) providerMessage(msg []byte) {
	var head wsHead
	if json.Unmarshal(msg, &head) != nil {
		return
	}
	s.providerEvent(head, msg) // websocket_outcome.go
}
