package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
)

// responseReader reads a provider's answer as it streams to the client
// (package response: JSON and SSE per format). Write always consumes all of
// p and never fails; memory is bounded.
type responseReader interface {
	Write(p []byte) (int, error)
	Usage() provider.Usage
	// Complete reports that a stream's terminal event was seen.
	Complete() bool
}

// newResponseReader makes the reader of a response to a request of format,
// streamed as Server-Sent Events or not; nil means no response is read
// (usage is then not logged). Tests replace it.
var newResponseReader = func(format provider.Format, stream bool) responseReader {
	return response.NewReader(format, response.Options{Stream: stream})
}

// forward sets the outcome header and placeholders, passes the request on
// with a writer that watches the answer, flushes the answer to the client,
// then commits the lineage if the provider accepted the request and writes
// the log line.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, next Next, ex *exchange) error {
	w.Header().Set(HeaderName, ex.out.header())
	setPlaceholders(r, &ex.out)

	tap := &responseTap{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}, format: ex.out.format, length: -1}
	if ex.commit != nil || ex.observe != nil {
		tap.onComplete = func() { g.answerWhole(ex, tap) }
	}
	defer ex.keepPromise() // after a panic too: a waiting compile goes on
	upstart := time.Now()
	defer func() {
		// reverse_proxy aborts a response that broke mid-stream (upstream
		// reset, client gone) with a panic; it is not accepted, and the log
		// line is still written before the panic goes on.
		if v := recover(); v != nil {
			g.settle(ex, tap.status, errAborted)
			g.finalize(r, ex, tap, upstart, errAborted)
			panic(v)
		}
	}()
	var err error
	if ex.rec != nil {
		err = g.serveRecovering(tap, r, next, ex)
	} else {
		err = next(tap, r)
	}
	g.promiseAccepted(ex, tap.status, err)
	// The provider's verdict on the tenant is recorded before the client
	// has the answer: its next request, sent at once, is compiled as a
	// verified tenant's (verified.go).
	g.settle(ex, tap.status, err)
	deliver(w, tap.status, err)
	g.finalize(r, ex, tap, upstart, err)
	return err
}

// answerWhole runs the moment the provider's answer is whole, before its
// last bytes are handed to the client. An answer of declared length has
// its lineage recorded behind it (commitBehind), so that the client does
// not wait for the vault; the tenant's next compile waits for the record
// instead (pending.go). A stream's connection may stay open past its
// terminal event, so its lineage is recorded here, before that event goes
// out.
func (g *Gateway) answerWhole(ex *exchange, tap *responseTap) {
	ex.observeUsage(tap.reader)
	switch {
	case ex.commit == nil || ex.out.committed:
	case tap.length >= 0:
		g.commitBehind(ex)
	default:
		commit(ex)
	}
}

// commitBehind promises the lineage record of a whole answer and writes
// it in the background while the answer's last bytes go to the client:
// the record's write never waits for a slow client's reading, so the
// promise the tenant's next compile may wait on lasts only as long as the
// write. finalize joins it (commitIfAccepted). A panic in the write is
// logged and breaks the promise; it never reaches Caddy.
func (g *Gateway) commitBehind(ex *exchange) {
	ex.promised = g.promises().add(ex.out.tenant)
	done := make(chan struct{})
	ex.committing = done
	go func() {
		defer close(done)
		defer ex.keepPromise()
		defer func() {
			if v := recover(); v != nil {
				// The value is not logged: it could quote content.
				g.Logger.Error("recording a request's lineage panicked; the next request of the conversation inlines more",
					zap.String("panic_type", fmt.Sprintf("%T", v)))
			}
		}()
		commit(ex)
	}()
}

// promiseAccepted promises the lineage of an accepted answer whose end
// the tap could not see (no declared length, no terminal event), before
// deliver hands the client its last bytes.
func (g *Gateway) promiseAccepted(ex *exchange, status int, err error) {
	if ex.promised == nil && ex.commit != nil && !ex.out.committed && err == nil && status >= 200 && status < 300 {
		ex.promised = g.promises().add(ex.out.tenant)
	}
}

// keepPromise ends the promise of a lineage record (answerWhole), written
// or not.
func (ex *exchange) keepPromise() {
	if ex.promised != nil {
		ex.promised()
	}
}

// deliver flushes an answer the next handler wrote in full, so that the
// client has it before the lineage record, the log line and the ledger are
// written; otherwise it would wait in the server's buffer until the handler
// returns. Nothing is flushed when nothing was written or next failed
// (Caddy's error handling still writes the status then).
func deliver(w http.ResponseWriter, status int, err error) {
	if err != nil || status < 200 {
		return
	}
	_ = http.NewResponseController(w).Flush() // an unflushable writer sends at the handler's return
}

// clientStatus is the status the client got: the one written, or, when
// nothing was written and the next handler failed (reverse_proxy cannot
// reach the upstream), the one Caddy's error handling answers with: the
// error's status (502 for an unreachable upstream), else 500.
func clientStatus(written int, err error) int {
	if written != 0 || err == nil || err == errAborted {
		return written
	}
	var he caddyhttp.HandlerError
	if errors.As(err, &he) && he.StatusCode != 0 {
		return he.StatusCode
	}
	if errors.Is(err, context.Canceled) {
		return statusClientClosedRequest // the client left; reverse_proxy's code
	}
	return http.StatusInternalServerError
}

// statusClientClosedRequest is what reverse_proxy answers (and logs) for
// a client that went away.
const statusClientClosedRequest = 499

// errAborted stands for a response aborted with a panic.
var errAborted = errors.New("response aborted")

// finalize notes the provider's answer in the outcome, commits the
// lineage if the provider accepted the request, accounts the outcome and
// writes the log line. The tenant's verification is settled before it
// (forward).
func (g *Gateway) finalize(r *http.Request, ex *exchange, tap *responseTap, upstart time.Time, err error) {
	o := &ex.out
	o.upstream = time.Since(upstart)
	o.status, o.written = clientStatus(tap.status, err), tap.status
	o.responseBytes = tap.n
	ex.observeUsage(tap.reader)
	g.commitIfAccepted(ex, tap.status, err)
	switch {
	case err == nil:
	case r.Context().Err() != nil:
		o.outcome = string(ReasonClientAbort)
	case err == errAborted:
		o.outcome = "aborted"
	default:
		o.outcome = "error"
	}
	o.total = time.Since(ex.start)
	g.account(ex)
	g.Logger.Info("request", o.fields()...)
}

// settle hands the provider's verdict on the request to the verified set.
func (g *Gateway) settle(ex *exchange, status int, err error) {
	gt := ex.gate
	if gt.tenant == "" || g.Gate == nil {
		return
	}
	if err != nil {
		status = 0 // an answer that broke verifies nothing
	}
	g.Gate.settle(gt.tenant, gt.verified, gt.reason, status)
}

// commitIfAccepted records the lineage unless the answer's last bytes
// already did. The provider's answer is part of "accepted": a receipt's
// lease counts only for a request it answered 2xx in full (a whole answer
// promised its record, answerWhole). An error status, a reset (next fails
// or aborts before the answer was whole) or a client that left records
// nothing.
func (g *Gateway) commitIfAccepted(ex *exchange, status int, err error) {
	if ex.committing != nil {
		<-ex.committing // the write behind the answer (commitBehind)
	}
	accepted := err == nil && status >= 200 && status < 300
	switch {
	case ex.out.committed: // a stream's at its terminal event, or behind the answer
	case ex.committing != nil: // the write behind the answer panicked: not again
	case ex.promised != nil, accepted && ex.commit != nil:
		commit(ex)
	case ex.commit != nil && g.Stats != nil:
		g.Stats.Uncommitted.Add(1)
	}
	ex.keepPromise()
}

// observeUsage notes the provider's usage in the outcome and, once, hands
// it to the compiler: the provider's own figures calibrate the cost model
// (a response that read nothing from its cache says the cache is cold).
func (ex *exchange) observeUsage(r responseReader) {
	if r == nil || ex.observed {
		return
	}
	ex.out.usage = r.Usage()
	if ex.out.usage.Known && ex.observe != nil {
		ex.observed = true
		ex.observe(ex.out.usage)
	}
}

// commit records the request's lineage, once.
func commit(ex *exchange) {
	if ex.out.committed || ex.commit == nil {
		return
	}
	tc := time.Now()
	ex.commit()
	ex.out.commit = time.Since(tc)
	ex.out.committed = true
}

// responseTap passes the response through unbuffered and notes its status
// and size, teeing the body into a responseReader when there is one. It
// keeps Flush (SSE) and Hijack (WebSocket) reachable through Unwrap, as
// http.ResponseController and reverse_proxy expect.
//
// The lineage is promised the moment the provider's answer is whole (a
// stream's terminal event, or a body's declared length), before its last
// bytes are handed to the client (answerWhole): a client that sends its
// next request as soon as it has read the answer always finds this one
// recorded, so the next compile does not depend on timing. An answer that
// never completes (a reset mid-stream) is not committed.
type responseTap struct {
	*caddyhttp.ResponseWriterWrapper
	format     provider.Format
	reader     responseReader
	status     int
	n          int64
	length     int64  // the 2xx body's Content-Length; -1 when unknown
	onComplete func() // answerWhole; nil when there is nothing to commit or observe
}

func (t *responseTap) WriteHeader(code int) {
	// 1xx are interim answers (100 Continue, 103 Early Hints); 101 is the
	// final one of an upgrade.
	if t.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		t.status = code
		t.startReader()
	}
	t.ResponseWriter.WriteHeader(code)
}

// startReader picks the reader by the response's content type, known once
// the status is: only a 2xx answer carries usage worth reading.
func (t *responseTap) startReader() {
	if newResponseReader == nil || t.status < 200 || t.status >= 300 {
		return
	}
	if cl, err := strconv.ParseInt(t.Header().Get("Content-Length"), 10, 64); err == nil && cl >= 0 {
		t.length = cl
	}
	ct := t.Header().Get("Content-Type")
	t.reader = newResponseReader(t.format, strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "text/event-stream"))
}

// whole reports whether p completes the 2xx answer.
func (t *responseTap) whole(p []byte) bool {
	if t.status < 200 || t.status >= 300 {
		return false
	}
	if t.length >= 0 {
		return t.n+int64(len(p)) >= t.length
	}
	return t.reader != nil && t.reader.Complete()
}

func (t *responseTap) Write(p []byte) (int, error) {
	if t.status == 0 {
		t.status = http.StatusOK
		t.startReader()
	}
	if t.reader != nil {
		_, _ = t.reader.Write(p) // never fails
	}
	if t.onComplete != nil && t.whole(p) {
		t.onComplete()
		t.onComplete = nil
	}
	n, err := t.ResponseWriter.Write(p)
	t.n += int64(n)
	return n, err
}

// ReadFrom goes through Write, so that every byte is counted and teed
// (the wrapper's own ReadFrom would hand the reader to the connection).
func (t *responseTap) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(writerOnly{t}, r)
}

// writerOnly hides ReadFrom from io.Copy.
type writerOnly struct{ io.Writer }

var _ http.ResponseWriter = (*responseTap)(nil)

// usageFields renders the provider's usage when it reported one.
func usageFields(u provider.Usage) []zap.Field {
	if !u.Known {
		return nil
	}
	return []zap.Field{
		zap.Int("usage_input", u.Input),
		zap.Int("usage_output", u.Output),
		zap.Int("usage_cache_read", u.CacheRead),
		zap.Int("usage_cache_write", u.CacheWrite),
	}
}
