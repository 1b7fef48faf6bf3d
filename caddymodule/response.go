package caddymodule

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
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

// forward sets the report header and placeholders, passes the request on
// with a writer that watches the answer, then commits the lineage if the
// provider accepted the request and writes the log line.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, ex *exchange) error {
	rep := &ex.rep
	w.Header().Set(HeaderName, rep.header())
	setPlaceholders(r, rep)

	tap := &responseTap{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}, format: rep.format, length: -1}
	if ex.commit != nil || ex.observe != nil {
		tap.onComplete = func() {
			h.commit(ex)
			ex.observeUsage(tap.reader)
		}
	}
	upstart := time.Now()
	defer func() {
		// reverse_proxy aborts a response that broke mid-stream (upstream
		// reset, client gone) with a panic; it is not accepted, and the log
		// line is still written before the panic goes on.
		if v := recover(); v != nil {
			h.finish(r, ex, tap, upstart, errAborted)
			panic(v)
		}
	}()
	var err error
	if ex.rec != nil {
		err = h.serveRecovering(tap, r, next, ex)
	} else {
		err = next.ServeHTTP(tap, r)
	}
	h.finish(r, ex, tap, upstart, err)
	return err
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

// finish notes the provider's answer, commits the lineage if the provider
// accepted the request and writes the log line.
func (h *Handler) finish(r *http.Request, ex *exchange, tap *responseTap, upstart time.Time, err error) {
	rep := &ex.rep
	rep.upstream = time.Since(upstart)
	rep.status, rep.written = clientStatus(tap.status, err), tap.status
	rep.responseBytes = tap.n
	ex.observeUsage(tap.reader)

	// The provider's answer is part of "accepted": a receipt's lease counts
	// only for a request it answered 2xx in full. An error status, a reset
	// (next fails or aborts) or a client that left records nothing.
	accepted := err == nil && tap.status >= 200 && tap.status < 300
	if g := ex.gate; g.tenant != "" && h.gate != nil {
		status := tap.status
		if err != nil {
			status = 0 // an answer that broke verifies nothing
		}
		h.gate.settle(g.tenant, g.verified, g.reason, status)
	}
	switch {
	case rep.committed: // at the answer's last bytes, before the client got them
	case accepted && ex.commit != nil:
		h.commit(ex)
	case ex.commit != nil && h.stats != nil:
		h.stats.Uncommitted.Add(1)
	}
	switch {
	case err == nil:
	case r.Context().Err() != nil:
		rep.outcome = string(compiler.ReasonClientAbort)
	case err == errAborted:
		rep.outcome = "aborted"
	default:
		rep.outcome = "error"
	}
	rep.total = time.Since(ex.start)
	h.logger.Info("request", rep.fields()...)
	h.account(r, ex)
}

// observeUsage notes the provider's usage in the report and, once, hands
// it to the compiler: the provider's own figures calibrate the cost model
// (a response that read nothing from its cache says the cache is cold).
func (ex *exchange) observeUsage(r responseReader) {
	if r == nil || ex.observed {
		return
	}
	ex.rep.usage = r.Usage()
	if ex.rep.usage.Known && ex.observe != nil {
		ex.observed = true
		ex.observe(ex.rep.usage)
	}
}

// commit records the request's lineage, once.
func (h *Handler) commit(ex *exchange) {
	if ex.rep.committed || ex.commit == nil {
		return
	}
	tc := time.Now()
	ex.commit()
	ex.rep.commit = time.Since(tc)
	ex.rep.committed = true
}

// responseTap passes the response through unbuffered and notes its status
// and size, teeing the body into a responseReader when there is one. It
// keeps Flush (SSE) and Hijack (WebSocket) reachable through Unwrap, as
// http.ResponseController and reverse_proxy expect.
//
// The lineage is committed the moment the provider's answer is whole (a
// stream's terminal event, or a body's declared length), before its last
// bytes are handed to the client: a client that sends its next request as
// soon as it has read the answer always finds this one recorded, so the
// next compile does not depend on timing. An answer that never completes
// (a reset mid-stream) is not committed.
type responseTap struct {
	*caddyhttp.ResponseWriterWrapper
	format     provider.Format
	reader     responseReader
	status     int
	n          int64
	length     int64  // the 2xx body's Content-Length; -1 when unknown
	onComplete func() // commits; nil when there is nothing to commit
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
