package gateway

import (
	"errors"

	"go.uber.org/zap/zapcore"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
	"github.com/tokenterminator/caddy-token-terminator/internal/wsrelay"
)

// How the socket's recovery loop fails inside a provider response. Two
// things stop it there: a provider message over the relay's bound
// (wsEventMax), which the relay leaves out whole (wsrelay.Tap.Dropped),
// and a message for which max_buffered_bytes has no room. Either way the
// client's response is ended well formed from the last complete round
// (recovery.Stitcher.Fail: response.failed when no round completed), the
// rest of that provider response is dropped until its terminal event, so
// nothing of it (the tool's items included) reaches the client, and the
// socket goes on serving: leaving a server message out whole keeps the
// stream well framed, so there is no close code to send. When nothing had
// reached the client yet, its own message goes out once the rest is
// dropped, and its answer passes as it comes.

// errOverBound: a provider message of the loop's response outgrew the
// relay's bound and was dropped.
var errOverBound = errors.New("recovery: a provider message over the relay's bound was dropped")

// headLoop is the loop the provider's next message belongs to, or nil.
func (s *wsSession) headLoop() *wsLoop {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 {
		return s.queue[0].loop
	}
	return nil
}

// droppedMessage takes a diverted provider message the relay left out,
// over its bound (prefix: its start, where its type is read). The
// relay's write lock is held.
func (s *wsSession) droppedMessage(prefix []byte) {
	if l := s.headLoop(); l != nil {
		l.overflow(leadingType(prefix))
	}
}

// redeliver hands on a provider message diverted to a loop that has
// ended: to the loop now at the head, else to the client as the tap
// would have written it. The relay's write lock is held.
func (s *wsSession) redeliver(msg []byte) {
	if l := s.headLoop(); l != nil {
		l.message(msg)
		return
	}
	_, _ = s.rc.Conn.Write(wsrelay.AppendFrame(nil, true, wsrelay.OpText, false, [4]byte{}, msg))
	s.providerMessage(msg)
}

// overflow takes a message of the loop's response that the relay
// dropped; typ is its type, "" when its start does not name it.
func (l *wsLoop) overflow(typ string) {
	if l.draining {
		if wsTerminal(typ) {
			l.drained()
		}
		return
	}
	l.stop()
	l.abort(errOverBound, !wsTerminal(typ))
}

// abort ends the loop on a failure at a provider message; mid: the rest
// of that response is still coming, and is dropped.
func (l *wsLoop) abort(err error, mid bool) {
	if !mid {
		l.fail(err, false)
		return
	}
	l.failed = err
	l.draining, l.midDrain = true, true
	if !l.st.Started() {
		l.resend = true // once the rest is dropped
		return
	}
	l.end(err)
}

// drain takes a provider message while the loop drops what is left of a
// response: its terminal event ends the dropping. A response.created
// while the rest of a response under way is dropped means that
// response's end was never read (a dropped message whose start did not
// name its type): the new response answers the next client message and
// is handed on.
func (l *wsLoop) drain(typ string, msg []byte) {
	switch {
	case msg == nil:
		l.drained()
	case wsTerminal(typ):
		// The provider bills the dropped response too: its usage joins
		// the message's record.
		rd := response.NewReader(provider.Responses, response.Options{Stream: true})
		rd.WriteEvent(typ, msg)
		l.usage = l.usage.Add(rd.Usage())
		l.drained()
	case l.midDrain && typ == "response.created":
		l.drained()
		l.s.redeliver(msg)
	}
}

// drained ends a loop whose dropped rest has ended.
func (l *wsLoop) drained() {
	l.draining, l.midDrain = false, false
	if l.resend {
		l.resend = false
		if _, ok := l.rc.rd.Inject(wsrelay.ClientText(l.original)); ok {
			l.log(zapcore.InfoLevel, fallbackRoundFailed, l.failed)
			l.m.ex.out.recovery.fallback = fallbackRoundFailed
			l.s.release(l)
			return
		}
		l.end(l.failed)
	}
	l.s.endLoop(l, "recovery_failed")
}

// end ends the client's response from the last complete round and logs
// why.
func (l *wsLoop) end(err error) {
	if cerr := l.st.Fail(err); cerr != nil && !errors.Is(cerr, recovery.ErrIncomplete) {
		err = errors.Join(err, cerr)
	}
	l.log(zapcore.WarnLevel, "", err)
}
