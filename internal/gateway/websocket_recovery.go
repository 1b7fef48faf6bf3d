package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
	"github.com/tokenterminator/caddy-token-terminator/internal/wsrelay"
)

// The recovery tool's loop over the Responses WebSocket. A compiled
// response.create that carries the tool goes out as compiled; the
// provider's messages of its response are diverted from the client
// (wsrelay.Tap.Divert) into a recovery.Stitcher, each message wrapped as
// the SSE event it would be over HTTPS, and the stitcher's events go back
// to the client as one text frame each, as they come: the client sees one
// response, renumbered, with no trace of the tool. When a round ends with
// calls of the tool, they are answered from the vault (within what the
// conversation reached) and the follow-up response.create goes out on the
// same upstream socket, injected into the client's stream at a message
// boundary (wsrelay.Reader.Inject). The follow-up continues the round's
// own response (recovery.FollowUpChained says why).
//
// Bounds: max_recovery_rounds follow-ups per client message; each
// follow-up's first provider message must come within body_read_timeout
// (after it, the stream is bound by reverse_proxy's own timeouts, as the
// client's own responses are). Failure before anything of the response
// reached the client resends the client's original message; after, the
// response is ended well formed from its last complete round and the
// rest of an abandoned follow-up's answer is dropped. The loop's buffers
// count in max_buffered_bytes (websocket_admit.go); a provider message
// over the relay's bound, or without room there, ends the response from
// inside (websocket_recovery_fail.go). Only a final response.completed
// commits the message's lineage.

// wsLoop is the recovery loop of one client message. Its fields belong to
// whoever holds the connection's write lock (relayConn.mu).
type wsLoop struct {
	s        *wsSession
	m        *wsMessage // the client's message: its outcome record
	usage    provider.Usage
	rc       *relayConn
	st       *recovery.Stitcher
	frames   *wsFrames // the stitcher's output: the client's messages
	arts     *recordingArtifacts
	res      compiler.Result // the compile: Commit, Recovered
	request  []byte          // the compiled message, with the tool
	original []byte          // the client's message as it came

	held     *loopHeld // its buffers in max_buffered_bytes (websocket_admit.go)
	rounds   int
	lastID   string // the id of the last round's response
	draining bool   // an abandoned follow-up's answer, or the rest of a response, is still coming
	midDrain bool   // draining the rest of a response already under way
	resend   bool   // once drained, the client's own message goes out (nothing reached the client)
	gen      int    // bumps on each provider message; a stale timer does nothing
	cancel   func() bool
	timer    *time.Timer
	failed   error
}

// recoveryLoop returns the loop of a forwarded message m that carries
// the tool, or false when no loop can run for it (no recovery tool
// configured, or the socket has no relay).
func (s *wsSession) recoveryLoop(m *wsMessage, res compiler.Result, original []byte) (*wsLoop, bool) {
	rt := s.h.Recovery
	if rt == nil || rt.mode != RecoveryTool || s.rc == nil || !s.rc.injecting {
		return nil, false
	}
	l := &wsLoop{s: s, m: m, rc: s.rc, res: res, request: res.Body, original: original,
		arts: &recordingArtifacts{Artifacts: recovery.Within(rt.arts, res.Reachable)}, held: s.h.loopHeld()}
	l.frames = &wsFrames{w: s.rc.Conn}
	st, err := recovery.NewStitcher(provider.Responses, l.frames, rt.cfg)
	if err != nil {
		return nil, false
	}
	l.st = st
	m.ex.out.recovery.offered = true
	return l, true
}

// divert reports whether the provider's next message belongs to a loop.
func (s *wsSession) divert() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue) > 0 && s.queue[0].loop != nil
}

// diverted hands a provider message to the loop of the oldest pending
// message (the relay's write lock is held); nil: the relay stopped
// reading the provider's frames (a message over its bound is dropped
// instead, droppedMessage).
func (s *wsSession) diverted(msg []byte) {
	if l := s.headLoop(); l != nil {
		l.message(msg)
	}
}

// release hands the rest of the loop's response back to the tap: it
// passes as it comes and settles the message (providerEvent) with
// nothing committed.
func (s *wsSession) release(l *wsLoop) {
	l.held.release()
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.m.loop == l {
		l.m.loop = nil
		l.m.ex.commit = nil
	}
}

// endLoop settles the loop's message once the stream the client saw has
// ended: outcome "" when it completed (the lineage is committed), else
// what ended it.
func (s *wsSession) endLoop(l *wsLoop, outcome string) {
	s.mu.Lock()
	at := -1
	for i, m := range s.queue {
		if m == l.m && m.loop == l {
			at = i
			break
		}
	}
	if at < 0 {
		s.mu.Unlock()
		return
	}
	s.queue = append(s.queue[:at], s.queue[at+1:]...)
	s.mu.Unlock()
	l.held.release()
	m := l.m
	m.ex.out.recovery.rounds = l.rounds
	if l.failed != nil {
		m.ex.out.recovery.err = l.failed.Error()
	}
	if l.lastID != "" {
		m.respID = l.lastID // a continuation names the last round's response
	}
	if outcome != "" {
		m.ex.commit = nil
	} else {
		// The stitched response.completed, as the client saw it (no
		// trace of the tool): its output is what the client re-sends,
		// so a continuation extends the lineage through it
		// (websocket_lineage.go).
		m.completed = l.frames.completed
	}
	s.settle(m, http.StatusOK, outcome, loopUsage(l.usage))
	m.completed = nil
}

// loopUsage is the usage summed over a loop's rounds, as the outcome
// reads a response's.
type loopUsage provider.Usage

func (u loopUsage) Write(p []byte) (int, error) { return len(p), nil }
func (u loopUsage) Usage() provider.Usage       { return provider.Usage(u) }
func (u loopUsage) Complete() bool              { return true }

// wsEventHead is what the loop reads of a provider message.
type wsEventHead struct {
	Type     string `json:"type"`
	Response struct {
		ID string `json:"id"`
	} `json:"response"`
}

func wsTerminal(typ string) bool {
	switch typ {
	case "response.completed", "response.failed", "response.incomplete", "error":
		return true
	}
	return false
}

// message takes one provider message of the loop's response.
func (l *wsLoop) message(msg []byte) {
	var head wsEventHead
	if msg != nil {
		_ = json.Unmarshal(msg, &head)
	}
	if l.draining {
		l.drain(head.Type, msg) // websocket_recovery_fail.go
		return
	}
	l.stop()
	if msg == nil {
		// The relay stopped reading the provider's frames (one it cannot
		// read): the rest passes as it comes, nothing committed.
		l.fail(errors.New("recovery: the provider's frames could not be read"), false)
		l.s.release(l)
		return
	}
	if head.Type == "error" && l.rounds > 0 {
		// A follow-up refused: the client, which never sent it, gets its
		// response ended from the last complete round instead.
		l.fail(errors.New("recovery: the provider refused the follow-up"), false)
		return
	}
	if !l.held.take(wsStitchFactor * int64(len(msg))) {
		l.abort(errRecoveryBusy, !wsTerminal(head.Type))
		return
	}
	_, _ = l.st.Write(sseOf(head.Type, msg))
	if !wsTerminal(head.Type) {
		return
	}
	if head.Type == "response.completed" {
		l.lastID = head.Response.ID
	}
	round, err := l.st.EndRound()
	l.usage = l.usage.Add(round.Usage)
	switch {
	case err != nil:
		l.fail(err, false)
	case !round.Continue:
		l.finish(head.Type)
	default:
		l.followUp(round)
	}
}

// followUp answers a round's calls and injects the next request.
func (l *wsLoop) followUp(round recovery.Round) {
	h := l.s.h
	ctx, cancel := context.WithTimeout(l.s.ctx, l.deadline())
	recovery.Run(ctx, h.Recovery.cfg, l.arts, l.s.scope.Tenant, round.Calls)
	cancel()
	body, err := recovery.FollowUpChained(l.request, l.lastID, round.Answer, round.Calls)
	if err != nil {
		l.fail(err, false)
		return
	}
	if !l.held.take(int64(len(body))) {
		l.fail(errRecoveryBusy, false)
		return
	}
	withdraw, ok := l.rc.rd.Inject(wsrelay.ClientText(body))
	if !ok {
		l.fail(errors.New("recovery: the client's stream takes no follow-up"), false)
		return
	}
	l.rounds++
	l.markRecovered()
	l.request, l.cancel = body, withdraw
	l.arm()
}

// deadline is the wait for a follow-up's first provider message.
func (l *wsLoop) deadline() time.Duration {
	if d := l.s.h.BodyReadTimeout; d > 0 {
		return d
	}
	return defaultFollowUpWait
}

// defaultFollowUpWait bounds the wait when body_read_timeout is off.
const defaultFollowUpWait = 30 * time.Second

// arm starts the follow-up's deadline.
func (l *wsLoop) arm() {
	gen := l.gen
	l.timer = time.AfterFunc(l.deadline(), func() {
		l.rc.mu.Lock()
		defer l.rc.mu.Unlock()
		if l.gen != gen || l.draining || l.failed != nil {
			return
		}
		l.fail(errors.New("recovery: no answer to the follow-up within body_read_timeout"), true)
	})
}

// stop ends a pending deadline: the provider answered.
func (l *wsLoop) stop() {
	l.gen++
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
}

// fail ends the loop. inFlight: a follow-up may still be answered.
func (l *wsLoop) fail(err error, inFlight bool) {
	l.failed = err
	if inFlight && l.cancel != nil && l.cancel() {
		inFlight = false // withdrawn before it went out
	}
	if !l.st.Started() && !inFlight {
		// Nothing reached the client: it gets the answer to its own
		// message, which passes as it comes and commits nothing.
		if _, ok := l.rc.rd.Inject(wsrelay.ClientText(l.original)); ok {
			l.log(zapcore.InfoLevel, fallbackRoundFailed, err)
			l.m.ex.out.recovery.fallback = fallbackRoundFailed
			l.s.release(l)
			return
		}
	}
	l.end(err)
	if inFlight {
		l.draining = true
		return
	}
	l.s.endLoop(l, "recovery_failed")
}

// finish ends a loop whose stream ended: a final response.completed
// commits the lineage, with what the loop recovered.
func (l *wsLoop) finish(typ string) {
	if typ == "response.completed" {
		l.markRecovered() // before the commit (endLoop) records the lineage
	}
	if l.rounds > 0 {
		l.log(zapcore.InfoLevel, "", nil)
	}
	outcome := ""
	if typ != "response.completed" {
		outcome = strings.TrimPrefix(typ, "response.")
	}
	l.s.endLoop(l, outcome)
}

func (l *wsLoop) markRecovered() {
	if l.res.Recovered != nil && len(l.arts.got) > l.arts.noted {
		l.res.Recovered(l.arts.got[l.arts.noted:]...)
		l.arts.noted = len(l.arts.got)
	}
}

func (l *wsLoop) log(level zapcore.Level, fallback string, err error) {
	f := []zap.Field{zap.String("format", string(wsCompiledFormat)), zap.String("path", l.s.path), zap.Bool("websocket", true),
		zap.Bool("recovery_tool", true), zap.Int("recovery_rounds", l.rounds)}
	if fallback != "" {
		f = append(f, zap.String("recovery_fallback", fallback))
	}
	if err != nil {
		f = append(f, zap.String("recovery_error", err.Error()))
	}
	l.s.h.Logger.Log(level, "websocket recovery", f...)
}

// sseOf wraps a provider message as the SSE event it is over HTTPS.
func sseOf(typ string, msg []byte) []byte {
	out := make([]byte, 0, len(msg)+len(typ)+24)
	if typ != "" {
		out = append(append(append(out, "event: "...), typ...), '\n')
	}
	for line := range bytes.SplitSeq(msg, []byte{'\n'}) {
		out = append(append(append(out, "data: "...), line...), '\n')
	}
	return append(out, '\n')
}

// wsFrames turns the stitcher's SSE events back into provider messages:
// one unmasked text frame per event, its data lines joined.
type wsFrames struct {
	w   interface{ Write([]byte) (int, error) }
	buf []byte
	// completed is the last response.completed message written, for the
	// lineage the loop commits (endLoop).
	completed []byte
}

func (f *wsFrames) Write(p []byte) (int, error) {
	f.buf = append(f.buf, p...)
	for {
		i := bytes.Index(f.buf, []byte("\n\n"))
		if i < 0 {
			return len(p), nil
		}
		var data []byte
		n, done := 0, false
		for line := range bytes.SplitSeq(f.buf[:i], []byte{'\n'}) {
			if typ, ok := bytes.CutPrefix(line, []byte("event:")); ok {
				done = string(bytes.TrimSpace(typ)) == "response.completed"
			}
			v, ok := bytes.CutPrefix(line, []byte("data:"))
			if !ok {
				continue
			}
			v = bytes.TrimPrefix(v, []byte{' '})
			if n > 0 {
				data = append(data, '\n')
			}
			data = append(data, v...)
			n++
		}
		f.buf = f.buf[:copy(f.buf, f.buf[i+2:])]
		if n == 0 {
			continue
		}
		if done {
			f.completed = data
		}
		if _, err := f.w.Write(wsrelay.AppendFrame(nil, true, wsrelay.OpText, false, [4]byte{}, data)); err != nil {
			return 0, err
		}
	}
}
