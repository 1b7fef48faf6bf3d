package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// Recovery glue (package recovery has the pieces): the artifact API under
// recovery_path, and the loop that answers the model's calls of the
// token_terminator tool for a request that carried it, so that the client
// sees one ordinary answer with no trace of the tool.

// RecoveryRuntime is a gateway's recovery; nil when recovery is
// off (configured, or the vault cannot resolve artifacts).
type RecoveryRuntime struct {
	mode string // RecoveryTool or RecoveryAPI
	cfg  recovery.Config
	arts recovery.Artifacts
	api  http.Handler
}

// EnableRecovery sets up recovery of mode (RecoveryTool or RecoveryAPI;
// RecoveryOff does nothing) over the opened backend. A backend without
// Resolve/Search cannot serve either the API or the tool: recovery is then
// off, and the log says so.
func (g *Gateway) EnableRecovery(mode string, cfg recovery.Config, backend vault.Backend) {
	if mode == RecoveryOff {
		return
	}
	arts, ok := backend.(recovery.Artifacts)
	if !ok {
		g.Logger.Warn("the vault backend cannot resolve or search artifacts; recovery is off",
			zap.String("recovery", mode), zap.String("backend_type", fmt.Sprintf("%T", backend)))
		return
	}
	arts = countedArtifacts{Artifacts: arts, g: g}
	g.Recovery = &RecoveryRuntime{mode: mode, cfg: cfg, arts: arts, api: recovery.NewAPI(arts, g.apiTenant, cfg)}
}

// countedArtifacts counts the vault reads of the artifact API and the
// recovery tool (recovery_reads_total, by action): both read through it.
type countedArtifacts struct {
	recovery.Artifacts
	g *Gateway
}

func (c countedArtifacts) Get(ctx context.Context, tenant string, d artifact.Digest) (artifact.Artifact, bool, error) {
	c.g.Metrics.RecoveryRead("get")
	return c.Artifacts.Get(ctx, tenant, d)
}

func (c countedArtifacts) Search(ctx context.Context, tenant, query string, limit int) ([]artifact.Artifact, error) {
	c.g.Metrics.RecoveryRead("search")
	return c.Artifacts.Search(ctx, tenant, query, limit)
}

// CompilerRecovery is what the compiler is told of the effective recovery:
// the receipts' hint and, with tool, the definitions.
func (g *Gateway) CompilerRecovery() compiler.Recovery {
	if g == nil || g.Recovery == nil {
		return compiler.Recovery{}
	}
	return CompilerRecovery(g.Recovery.mode, g.Recovery.cfg)
}

// apiTenant is the tenant of an API caller: its identity selects it
// exactly as for provider requests, and only a verified tenant (one the
// provider has accepted, and not refused since) is served. The API is
// tenant-wide: the tenant's own credential (or configured identity) asks.
func (g *Gateway) apiTenant(r *http.Request) (string, bool) {
	t := g.tenant(r, "")
	if t == "" {
		return "", false
	}
	if g.Gate != nil {
		if ok, _, _ := g.Gate.check(r.Context(), t); !ok {
			return "", false
		}
	}
	return t, true
}

// serveRecoveryAPI serves requests under recovery_path and reports whether
// it did; they are never forwarded upstream.
func (g *Gateway) serveRecoveryAPI(w http.ResponseWriter, r *http.Request) bool {
	rt := g.Recovery
	if rt == nil || !strings.HasPrefix(r.URL.Path, rt.cfg.Path) {
		return false
	}
	sw := &statusWriter{ResponseWriter: w}
	rt.api.ServeHTTP(sw, g.sealed(r, ""))
	// The path names only an opaque id; the query (search text) is never
	// logged.
	g.Logger.Info("recovery api", zap.String("method", r.Method), zap.Int("status", sw.status),
		zap.Bool("tenant", g.tenant(r, "") != ""))
	return true
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) { s.status = code; s.ResponseWriter.WriteHeader(code) }

// recoveryExchange is the recovery state of one request that went upstream
// with the tool.
type recoveryExchange struct {
	tenant    string
	format    provider.Format
	body      []byte // the forwarded body (compiled, with the tool)
	original  []byte // the client's body, sent unchanged if a round fails
	recovered func(...artifact.Digest)
	// reachable is what the model may recover: what its conversation's
	// forwarded requests named or carried (compiler.Result.Reachable).
	reachable []artifact.Digest
}

// recoveryReport is the recovery part of the outcome.
type recoveryReport struct {
	offered  bool   // the forwarded body carried the tool
	conflict bool   // the client's tools already name ours: none offered
	rounds   int    // follow-up requests sent
	fallback string // why the client's original request was sent instead
	err      string // the loop's error, for the log (no content)
	streamed bool   // the answer was streamed (rounds unknown to the header)
}

func (rr *recoveryReport) header(b *strings.Builder) {
	if rr.offered && !rr.streamed {
		b.WriteString("; recovery_rounds=")
		b.WriteString(strconv.Itoa(rr.rounds))
	}
}

func (rr *recoveryReport) fields() []zap.Field {
	if !rr.offered && !rr.conflict {
		return nil
	}
	f := []zap.Field{zap.Bool("recovery_tool", rr.offered), zap.Int("recovery_rounds", rr.rounds)}
	if rr.conflict {
		f = append(f, zap.Bool("recovery_tool_conflict", true))
	}
	if rr.fallback != "" {
		f = append(f, zap.String("recovery_fallback", rr.fallback))
	}
	if rr.err != "" {
		f = append(f, zap.String("recovery_error", rr.err))
	}
	return f
}

// noteRecovery prepares the loop for a request whose forwarded body
// carries the tool. Upstream is asked for an identity-encoded answer: the
// loop must read it.
func (g *Gateway) noteRecovery(r *http.Request, ex *exchange, res compiler.Result, original, out []byte, tenant string) {
	o := &ex.out
	if res.ToolConflict {
		o.recovery.conflict = true
		g.Logger.Info("the client defines a tool named token_terminator; no recovery tool offered (receipts name none)",
			zap.String("format", string(o.format)))
	}
	if g.Recovery == nil || g.Recovery.mode != RecoveryTool || !res.RecoveryTool || res.Body == nil || !bytes.Equal(res.Body, out) {
		return
	}
	o.recovery.offered = true
	ex.rec = &recoveryExchange{tenant: tenant, format: o.format, body: out, original: original, recovered: res.Recovered, reachable: res.Reachable}
	r.Header.Del("Accept-Encoding")
}

// Fallback reasons of the log.
const (
	fallbackRoundFailed = "round_failed"
	fallbackStreamBroke = "stream_failed"
)

// serveRecovering forwards a request that carried the tool and runs the
// loop on its answer: buffered when it is JSON, stitched when it is SSE,
// passed through untouched when it is anything else (an error status, a
// compressed or oversized body).
func (g *Gateway) serveRecovering(w http.ResponseWriter, r *http.Request, next Next, ex *exchange) error {
	rx, rt := ex.rec, g.Recovery
	// The model reads only its own conversation's artifacts, never the
	// rest of the tenant's: anything else answers as an unknown id.
	arts := &recordingArtifacts{Artifacts: recovery.Within(rt.arts, rx.reachable)}
	defer markRecovered(ex, arts)
	held := &heldBytes{budget: g.Buffered, max: g.MaxBufferedBytes}
	defer held.release()
	ex.held = held
	c := &firstRound{w: w, header: http.Header{}, max: int(g.MaxBodySize), hold: held.take, cfg: rt.cfg, format: rx.format,
		onStream: func() {
			// The rounds of a stream are not known when its header goes
			// out: the header omits them (the log has them).
			ex.out.recovery.streamed = true
			w.Header().Set(HeaderName, ex.out.header())
		}}
	err := next(c, r)
	switch c.kind {
	case roundJSON:
		if err != nil {
			c.passOn()
			return err
		}
		return g.loopJSON(w, r, next, ex, arts, c)
	case roundStream:
		return g.loopStream(w, r, next, ex, arts, c, err)
	}
	return err // passed through as it came (or nothing was written)
}

func (g *Gateway) loopJSON(w http.ResponseWriter, r *http.Request, next Next, ex *exchange, arts *recordingArtifacts, c *firstRound) error {
	rx, o := ex.rec, &ex.out
	send := func(ctx context.Context, body []byte) (io.ReadCloser, error) {
		if !ex.held.take(len(body)) {
			return nil, errRecoveryBusy
		}
		var buf bytes.Buffer
		if err := g.sendFollowUp(ctx, r, next, ex.body, body, &boundedWriter{b: &buf, max: c.max, hold: ex.held.take}); err != nil {
			return nil, err
		}
		return io.NopCloser(&buf), nil
	}
	final, rounds, err := recovery.LoopJSON(r.Context(), g.Recovery.cfg, arts, rx.tenant, rx.format, rx.body, c.buf.Bytes(), c.max, send)
	o.recovery.rounds = rounds
	markRecovered(ex, arts)
	if err != nil {
		// Nothing reached the client yet: it gets the answer to its own
		// request, as if the gateway had never touched it.
		return g.fallback(w, r, next, ex, fallbackRoundFailed, err)
	}
	w.Header().Set(HeaderName, o.header()) // now with recovery_rounds
	writeAnswer(w, c.header, c.status, final)
	return nil
}

func (g *Gateway) loopStream(w http.ResponseWriter, r *http.Request, next Next, ex *exchange, arts *recordingArtifacts, c *firstRound, firstErr error) error {
	rx, o, st := ex.rec, &ex.out, c.st
	ctx := r.Context()
	request := rx.body
	fail := func(reason string, err error) error {
		if !st.Started() {
			return g.fallback(w, r, next, ex, reason, err)
		}
		// Bytes reached the client: end its stream well formed at what was
		// delivered.
		o.recovery.err = err.Error()
		if cerr := st.Close(); cerr != nil && !errors.Is(cerr, recovery.ErrIncomplete) {
			o.recovery.err += "; " + cerr.Error()
		}
		g.Logger.Warn("recovery round failed after the stream started; the client stream was ended where it was",
			zap.String("format", string(rx.format)), zap.Int("recovery_rounds", o.recovery.rounds), zap.Error(err))
		return nil
	}
	if firstErr != nil {
		return fail(fallbackStreamBroke, firstErr)
	}
	for {
		round, err := st.EndRound()
		if err != nil {
			return fail(fallbackStreamBroke, err)
		}
		if !round.Continue {
			return nil
		}
		recovery.Run(ctx, g.Recovery.cfg, arts, rx.tenant, round.Calls)
		body, err := recovery.FollowUp(rx.format, request, round.Answer, round.Calls)
		if err != nil {
			return fail(fallbackRoundFailed, err)
		}
		if !ex.held.take(len(body)) {
			return fail(fallbackRoundFailed, errRecoveryBusy)
		}
		o.recovery.rounds++
		markRecovered(ex, arts)
		if err := g.sendFollowUp(ctx, r, next, ex.body, body, st); err != nil {
			return fail(fallbackRoundFailed, err)
		}
		request = body
	}
}

// fallback sends the client's original request upstream unchanged and
// passes its answer to w (nothing has been written to w yet).
func (g *Gateway) fallback(w http.ResponseWriter, r *http.Request, next Next, ex *exchange, reason string, err error) error {
	o := &ex.out
	o.recovery.fallback, o.recovery.err = reason, err.Error()
	g.Logger.Warn("recovery round failed; sending the client's original request",
		zap.String("format", string(ex.rec.format)), zap.String("reason", reason),
		zap.Int("recovery_rounds", o.recovery.rounds), zap.Error(err))
	fr := r.Clone(r.Context())
	setBody(fr, ex.body, ex.rec.original)
	w.Header().Set(HeaderName, o.header())
	return next(w, fr)
}

// sendFollowUp sends body upstream as a fresh request of r (same method,
// path and headers) and writes a successful answer's body to dst. Another
// status, an error or an aborted answer is an error.
func (g *Gateway) sendFollowUp(ctx context.Context, r *http.Request, next Next, o *bodyBuffer, body []byte, dst io.Writer) (err error) {
	fr := r.Clone(ctx)
	setBody(fr, o, body) // a rewrite or a follow-up: held like the client's body should it ever lie in it
	// body is plain JSON, even when the client's was encoded (encoding.go).
	fr.Header.Del("Content-Encoding")
	// body is plain JSON, even when the client's was encoded (encoding.go).
	fr.Header.Del("Content-Encoding")
	fw := &followUpWriter{header: http.Header{}, dst: dst}
	defer func() {
		if v := recover(); v != nil { // reverse_proxy aborts a broken answer with a panic
			err = fmt.Errorf("recovery: follow-up aborted: %v", errAborted)
		}
	}()
	if err := next(fw, fr); err != nil {
		return fmt.Errorf("recovery: follow-up: %w", err)
	}
	if fw.status < 200 || fw.status > 299 {
		return fmt.Errorf("recovery: follow-up answered status %d", fw.status)
	}
	return fw.err
}

// writeAnswer writes a whole answer with its headers.
func writeAnswer(w http.ResponseWriter, header http.Header, status int, body []byte) {
	dst := w.Header()
	for k, v := range header {
		dst[k] = v
	}
	dst.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// roundKind is how the first answer is handled.
type roundKind int

const (
	roundUndecided roundKind = iota
	roundPass                // written through as it comes
	roundJSON                // buffered for LoopJSON
	roundStream              // written into a Stitcher
)

// firstRound is the ResponseWriter of the first upstream round. It decides
// at the status line: a successful JSON answer is buffered (within max),
// an SSE answer goes into a Stitcher writing to the client, anything else
// passes through.
type firstRound struct {
	w        http.ResponseWriter
	header   http.Header
	status   int
	kind     roundKind
	buf      bytes.Buffer
	max      int
	hold     func(n int) bool // counts buffered bytes in max_buffered_bytes
	cfg      recovery.Config
	format   provider.Format
	st       *recovery.Stitcher
	client   *deferredClient
	onStream func() // called when the answer turns out to be a stream
}

func (c *firstRound) Header() http.Header { return c.header }

func (c *firstRound) WriteHeader(code int) {
	if c.kind != roundUndecided || code < 200 {
		return // 1xx interim answers are not relayed; a second status is ignored
	}
	c.status = code
	ct, _, _ := mime.ParseMediaType(c.header.Get("Content-Type"))
	enc := c.header.Get("Content-Encoding")
	switch {
	case code < 200 || code > 299 || (enc != "" && enc != "identity"):
		c.passOn()
	case ct == "text/event-stream":
		c.client = &deferredClient{w: c.w, header: c.header, status: code}
		st, err := recovery.NewStitcher(c.format, c.client, c.cfg)
		if err != nil {
			c.passOn()
			return
		}
		c.kind, c.st = roundStream, st
		c.onStream()
	default:
		c.kind = roundJSON
	}
}

// passOn switches to pass-through: headers, status and what is buffered go
// to the client, and so does the rest.
func (c *firstRound) passOn() {
	if c.kind == roundPass {
		return
	}
	c.kind = roundPass
	dst := c.w.Header()
	for k, v := range c.header {
		dst[k] = v
	}
	if c.status == 0 {
		c.status = http.StatusOK
	}
	c.w.WriteHeader(c.status)
	if c.buf.Len() > 0 {
		_, _ = c.w.Write(c.buf.Bytes())
		c.buf = bytes.Buffer{}
	}
}

func (c *firstRound) Write(p []byte) (int, error) {
	if c.kind == roundUndecided {
		c.WriteHeader(http.StatusOK)
	}
	switch c.kind {
	case roundJSON:
		if c.buf.Len()+len(p) > c.max || (c.hold != nil && !c.hold(len(p))) {
			c.passOn() // too large to hold, or no room: it goes out unread
			return c.w.Write(p)
		}
		return c.buf.Write(p)
	case roundStream:
		return c.st.Write(p)
	}
	return c.w.Write(p)
}

// Flush reaches the client once something was written to it.
func (c *firstRound) Flush() {
	switch {
	case c.kind == roundPass:
		_ = http.NewResponseController(c.w).Flush()
	case c.kind == roundStream:
		c.client.Flush()
	}
}

// deferredClient writes the first answer's status and headers to the
// client with the first byte of the stitched stream: until then a failed
// round can still fall back to the original request.
type deferredClient struct {
	w       http.ResponseWriter
	header  http.Header
	status  int
	started bool
}

func (d *deferredClient) Write(p []byte) (int, error) {
	if !d.started {
		d.started = true
		dst := d.w.Header()
		for k, v := range d.header {
			dst[k] = v
		}
		dst.Del("Content-Length") // the stitched stream is not the provider's
		d.w.WriteHeader(d.status)
	}
	return d.w.Write(p)
}

func (d *deferredClient) Flush() {
	if d.started {
		_ = http.NewResponseController(d.w).Flush()
	}
}

// followUpWriter is the ResponseWriter of a follow-up round: a successful
// answer's body goes to dst, anything else is dropped (and is an error).
type followUpWriter struct {
	header http.Header
	status int
	dst    io.Writer
	err    error
}

func (f *followUpWriter) Header() http.Header { return f.header }

func (f *followUpWriter) WriteHeader(code int) {
	if f.status == 0 && code >= 200 {
		f.status = code
	}
}

func (f *followUpWriter) Write(p []byte) (int, error) {
	if f.status == 0 {
		f.status = http.StatusOK
	}
	if f.status > 299 || f.err != nil {
		return len(p), nil // an error body: dropped, never shown to the model or client
	}
	if _, err := f.dst.Write(p); err != nil {
		f.err = err
		return 0, err
	}
	return len(p), nil
}

func (f *followUpWriter) Flush() {}

// recordingArtifacts notes every artifact the loop read, so the lineage
// can carry them inline again (Result.Recovered).
type recordingArtifacts struct {
	recovery.Artifacts
	got   []artifact.Digest
	noted int // got[:noted] were handed to Result.Recovered
}

// markRecovered hands the artifacts read so far to the lineage, and stops
// the cost calibration from seeing a usage summed over several requests.
// It runs before the answer's last bytes reach the tap, which commits the
// lineage (and observes usage) the moment the answer is whole.
func markRecovered(ex *exchange, arts *recordingArtifacts) {
	if rx := ex.rec; rx != nil && rx.recovered != nil && len(arts.got) > arts.noted {
		rx.recovered(arts.got[arts.noted:]...)
		arts.noted = len(arts.got)
	}
	if ex.out.recovery.rounds > 0 {
		ex.observe = nil
	}
}

func (a *recordingArtifacts) Get(ctx context.Context, tenant string, d artifact.Digest) (artifact.Artifact, bool, error) {
	art, ok, err := a.Artifacts.Get(ctx, tenant, d)
	if ok && err == nil {
		a.got = append(a.got, d)
	}
	return art, ok, err
}

// boundedWriter buffers at most max bytes, each counted by hold (nil:
// not counted); past it, or when hold refuses, writes fail.
type boundedWriter struct {
	b    *bytes.Buffer
	max  int
	hold func(n int) bool
}

func (b *boundedWriter) Write(p []byte) (int, error) {
	if b.b.Len()+len(p) > b.max {
		return 0, recovery.ErrAnswerTooLarge
	}
	if b.hold != nil && !b.hold(len(p)) {
		return 0, errRecoveryBusy
	}
	return b.b.Write(p)
}

// errRecoveryBusy: a recovery buffer (an answer, a follow-up body) found
// no room in max_buffered_bytes.
var errRecoveryBusy = errors.New("recovery: no room in max_buffered_bytes")

// heldBytes counts one exchange's recovery buffers in max_buffered_bytes:
// the first answer while it is held for the loop, each follow-up body and
// each buffered follow-up answer, until the exchange ends (release). Only
// the handler's goroutine takes.
type heldBytes struct {
	budget *atomic.Int64
	max    int64
	n      int64
}

// take counts n more bytes, false (nothing counted) when they do not fit.
func (h *heldBytes) take(n int) bool {
	if h.budget.Add(int64(n)) > h.max {
		h.budget.Add(-int64(n))
		return false
	}
	h.n += int64(n)
	return true
}

func (h *heldBytes) release() {
	h.budget.Add(-h.n)
	h.n = 0
}
