package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// These tests drive ServeHTTP with a fake compiler and a fake candidate
// check, so the handler's own behaviour (buffering, streaming, body
// rewiring, reporting, fail-open) is tested independently of the compiler.

type seen struct {
	calls    int
	body     []byte
	bodyObj  io.ReadCloser
	readErr  error
	cl       int64
	clHeader string
	te       []string
	getBody  []byte
}

// recordNext is the next handler: it records what it was given.
func recordNext(s *seen) Next {
	return Next(func(w http.ResponseWriter, r *http.Request) error {
		s.calls++
		s.bodyObj = r.Body
		s.cl = r.ContentLength
		s.clHeader = r.Header.Get("Content-Length")
		s.te = r.TransferEncoding
		s.body, s.readErr = io.ReadAll(r.Body)
		if r.GetBody != nil {
			rc, err := r.GetBody()
			if err != nil {
				return err
			}
			s.getBody, _ = io.ReadAll(rc)
		}
		w.WriteHeader(http.StatusOK)
		return nil
	})
}

type fakeCompiler struct {
	calls atomic.Int32
	fn    func(ctx context.Context, req compiler.Request) compiler.Result
	last  compiler.Request
}

func (f *fakeCompiler) compile(ctx context.Context, req compiler.Request) compiler.Result {
	f.calls.Add(1)
	f.last = req
	if f.fn != nil {
		return f.fn(ctx, req)
	}
	return compiler.Result{Body: req.Body, Decision: compiler.Passthrough, Reason: "no_slots", RawBytes: len(req.Body), SentBytes: len(req.Body)}
}

// testHandler is a gateway with the handler's defaults, a fake compiler
// and a fake candidate check; mutate sets its configuration.
func testHandler(t testing.TB, fc *fakeCompiler, mutate func(*Gateway)) (*Gateway, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	h := New(Config{
		Mode:                  compiler.ModeEnforce,
		MaxBodySize:           32 << 20,
		MaxBufferedBytes:      256 << 20,
		MaxConcurrentCompiles: runtime.GOMAXPROCS(0),
		CompileTimeout:        compiler.DefaultTimeout,
		BodyReadTimeout:       30 * time.Second,
		BypassHeader:          HeaderName,
	}, zap.New(core))
	if mutate != nil {
		mutate(h)
	}
	h.Slots = NewCompileSlots(h.MaxConcurrentCompiles)
	h.Stats = new(Stats)
	h.Metrics = NewMetrics()
	h.Compile = fc.compile
	h.Tenants = func(c string) string {
		if c == "" {
			return ""
		}
		return "t:" + strconv.Itoa(len(c)) + ":" + c[len(c)-1:]
	}
	h.FormatFor = func(method, path string) (provider.Format, bool) {
		if method == http.MethodPost && strings.HasSuffix(path, "/chat/completions") {
			return provider.Chat, true
		}
		return "", false
	}
	return h, logs
}

func newRequest(method, path string, body io.Reader) *http.Request {
	r := httptest.NewRequest(method, path, body)
	// Every test request carries a credential unless the test removes it:
	// without one a candidate gets no cross-request state (no_tenant).
	r.Header.Set("Authorization", "Bearer sk-default")
	repl := caddyhttp.NewTestReplacer(r)
	return r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
}

const chatPath = "/v1/chat/completions"

func TestNonCandidateUntouched(t *testing.T) {
	for _, tc := range []struct{ name, method, path string }{
		{"GET", http.MethodGet, chatPath},
		{"other path", http.MethodPost, "/v1/embeddings"},
		{"suffix lookalike", http.MethodPost, "/v1/chat/completions/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := &fakeCompiler{}
			h, logs := testHandler(t, fc, nil)
			body := io.NopCloser(strings.NewReader(`{"a":1}`))
			r := newRequest(tc.method, tc.path, nil)
			r.Body = body
			w, s := serve(t, h, r)
			if s.bodyObj != body {
				t.Fatal("non-candidate body was replaced (buffered)")
			}
			if fc.calls.Load() != 0 || w.Header().Get(HeaderName) != "" || logs.Len() != 0 {
				t.Fatal("non-candidate was compiled, reported or logged")
			}
		})
	}
}

func TestModeOffUntouched(t *testing.T) {
	fc := &fakeCompiler{}
	h, _ := testHandler(t, fc, func(h *Gateway) { h.Mode = "off" })
	body := io.NopCloser(strings.NewReader(`{}`))
	r := newRequest(http.MethodPost, chatPath, nil)
	r.Body = body
	w, s := serve(t, h, r)
	if s.bodyObj != body || fc.calls.Load() != 0 || w.Header().Get(HeaderName) != "" {
		t.Fatal("mode off touched the request")
	}
}

func TestContentEncodingPassthrough(t *testing.T) {
	// Codings the module does not decode (encoding_test.go has those it does).
	for _, ce := range []string{"deflate", "compress", "gzip, identity", "zstd, gzip"} {
		t.Run(ce, func(t *testing.T) {
			fc := &fakeCompiler{}
			h, logs := testHandler(t, fc, nil)
			body := io.NopCloser(strings.NewReader("\x1f\x8b..."))
			r := newRequest(http.MethodPost, chatPath, nil)
			r.Body, r.ContentLength = body, 5
			r.Header.Set("Content-Encoding", ce)
			w, s := serve(t, h, r)
			if s.bodyObj != body || fc.calls.Load() != 0 {
				t.Fatal("encoded body was buffered or compiled")
			}
			if got, want := w.Header().Get(HeaderName), "passthrough=content_encoding; raw_bytes=5; sent_bytes=5; receipts=0; tokens=none"; got != want {
				t.Fatalf("header %q, want %q", got, want)
			}
			if logs.Len() != 1 {
				t.Fatalf("%d log lines, want 1", logs.Len())
			}
		})
	}
	t.Run("identity is compiled", func(t *testing.T) {
		fc := &fakeCompiler{}
		h, _ := testHandler(t, fc, nil)
		r := newRequest(http.MethodPost, chatPath, strings.NewReader(`{}`))
		r.Header.Set("Content-Encoding", "identity")
		var s seen
		if err := h.ServeHTTP(httptest.NewRecorder(), r, recordNext(&s)); err != nil {
			t.Fatal(err)
		}
		if fc.calls.Load() != 1 {
			t.Fatal("identity encoding was not compiled")
		}
	})
}

func TestTooLargeDeclared(t *testing.T) {
	fc := &fakeCompiler{}
	h, _ := testHandler(t, fc, func(h *Gateway) { h.MaxBodySize = 100 })
	body := &countingReader{r: bytes.NewReader(bytes.Repeat([]byte("x"), 101))}
	r := newRequest(http.MethodPost, chatPath, nil)
	r.Body, r.ContentLength = io.NopCloser(body), 101
	w := httptest.NewRecorder()
	var s seen
	next := Next(func(w http.ResponseWriter, r *http.Request) error {
		if body.n.Load() != 0 {
			t.Errorf("handler read %d bytes of a body declared too large", body.n.Load())
		}
		return recordNext(&s)(w, r)
	})
	if err := h.ServeHTTP(w, r, next); err != nil {
		t.Fatal(err)
	}
	if fc.calls.Load() != 0 || len(s.body) != 101 || s.cl != 101 {
		t.Fatalf("compiled=%d forwarded=%d cl=%d", fc.calls.Load(), len(s.body), s.cl)
	}
	if got, want := w.Header().Get(HeaderName), "passthrough=too_large; raw_bytes=101; sent_bytes=101; receipts=0; tokens=none"; got != want {
		t.Fatalf("header %q, want %q", got, want)
	}
}

// countingReader counts what was read of r; the pump of body_read_timeout
// reads it on a goroutine of its own.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func TestTooLargeChunkedStreams(t *testing.T) {
	const limit = 1000
	full := bytes.Repeat([]byte("0123456789"), 100000) // 1 MB
	fc := &fakeCompiler{}
	h, _ := testHandler(t, fc, func(h *Gateway) { h.MaxBodySize = limit })
	body := &countingReader{r: bytes.NewReader(full)}
	r := newRequest(http.MethodPost, chatPath, nil)
	r.Body, r.ContentLength, r.TransferEncoding = io.NopCloser(body), -1, []string{"chunked"}
	w := httptest.NewRecorder()
	var s seen
	next := Next(func(w http.ResponseWriter, r *http.Request) error {
		// limit+1 bytes, and what the pump of body_read_timeout (on by
		// default) read ahead: the chunk in hand, one queued, one read.
		if n := body.n.Load(); n < limit+1 || n > limit+1+3*pumpChunk {
			t.Errorf("handler read %d bytes before forwarding, want %d and at most the pump's read-ahead", n, limit+1)
		}
		return recordNext(&s)(w, r)
	})
	if err := h.ServeHTTP(w, r, next); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s.body, full) {
		t.Fatalf("forwarded %d bytes, want the identical %d", len(s.body), len(full))
	}
	if fc.calls.Load() != 0 || s.cl != -1 || len(s.te) != 1 {
		t.Fatalf("compiled=%d cl=%d te=%v", fc.calls.Load(), s.cl, s.te)
	}
	if got, want := w.Header().Get(HeaderName), "passthrough=too_large; receipts=0; tokens=none"; got != want {
		t.Fatalf("header %q, want %q", got, want)
	}
}

func TestExactlyMaxBodyIsCompiled(t *testing.T) {
	fc := &fakeCompiler{}
	h, _ := testHandler(t, fc, func(h *Gateway) { h.MaxBodySize = 10 })
	r := newRequest(http.MethodPost, chatPath, nil)
	r.Body, r.ContentLength = io.NopCloser(strings.NewReader("0123456789")), -1
	var s seen
	if err := h.ServeHTTP(httptest.NewRecorder(), r, recordNext(&s)); err != nil {
		t.Fatal(err)
	}
	if fc.calls.Load() != 1 || string(s.body) != "0123456789" || s.cl != 10 {
		t.Fatalf("compiled=%d body=%q cl=%d", fc.calls.Load(), s.body, s.cl)
	}
}

type failingReader struct {
	data []byte
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

func TestReadErrorForwardedAsIs(t *testing.T) {
	boom := errors.New("client went away")
	fc := &fakeCompiler{}
	h, _ := testHandler(t, fc, nil)
	r := newRequest(http.MethodPost, chatPath, nil)
	r.Body, r.ContentLength = io.NopCloser(&failingReader{data: []byte(`{"model":`), err: boom}), 100
	w, s := serve(t, h, r)
	if fc.calls.Load() != 0 {
		t.Fatal("a failed read was compiled")
	}
	if string(s.body) != `{"model":` || !errors.Is(s.readErr, boom) {
		t.Fatalf("upstream saw %q, %v; want the partial body then the same error", s.body, s.readErr)
	}
	if s.cl != 100 {
		t.Fatalf("content length changed to %d", s.cl)
	}
	if got := w.Header().Get(HeaderName); !strings.HasPrefix(got, "passthrough=read_error;") {
		t.Fatalf("header %q", got)
	}
}

func TestAcceptedRewiresBody(t *testing.T) {
	orig := `{"model":"gpt-4o","messages":[` + strings.Repeat(" ", 100) + `]}`
	rewritten := []byte(`{"model":"gpt-4o","messages":[]}`)
	fc := &fakeCompiler{fn: func(ctx context.Context, req compiler.Request) compiler.Result {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("compile context has no deadline")
		}
		return compiler.Result{
			Body: rewritten, Decision: compiler.Accepted, Format: "openai_chat",
			RawBytes: len(req.Body), SentBytes: len(rewritten), Receipts: 2, Slots: 3,
			Tokens: compiler.TokenReport{Status: "exact", Encoding: "o200k_base", Raw: 50, Sent: 20},
		}
	}}
	h, logs := testHandler(t, fc, nil)
	r := newRequest(http.MethodPost, chatPath, nil)
	r.Body, r.ContentLength, r.TransferEncoding = io.NopCloser(strings.NewReader(orig)), -1, []string{"chunked"}
	r.Header.Set("Transfer-Encoding", "chunked")
	w, s := serve(t, h, r)
	if !bytes.Equal(s.body, rewritten) || !bytes.Equal(s.getBody, rewritten) {
		t.Fatalf("forwarded %q / GetBody %q", s.body, s.getBody)
	}
	if s.cl != int64(len(rewritten)) || s.clHeader != strconv.Itoa(len(rewritten)) || s.te != nil {
		t.Fatalf("cl=%d header=%q te=%v", s.cl, s.clHeader, s.te)
	}
	want := "accepted; raw_bytes=" + strconv.Itoa(len(orig)) + "; sent_bytes=" + strconv.Itoa(len(rewritten)) +
		"; receipts=2; raw_tokens=50; sent_tokens=20"
	if got := w.Header().Get(HeaderName); got != want {
		t.Fatalf("header %q, want %q", got, want)
	}
	if logs.Len() != 1 {
		t.Fatalf("%d log lines", logs.Len())
	}
	m := logs.All()[0].ContextMap()
	if m["decision"] != "accepted" || m["receipts"] != int64(2) || m["slots"] != int64(3) || m["raw_tokens"] != int64(50) {
		t.Fatalf("log fields %v", m)
	}
}

func TestPassthroughBufferedStillRewired(t *testing.T) {
	orig := []byte(`not json at all`)
	fc := &fakeCompiler{fn: func(ctx context.Context, req compiler.Request) compiler.Result {
		// A compiler that (wrongly) returns another body on pass-through
		// must not get it forwarded.
		return compiler.Result{Body: []byte("x"), Decision: compiler.Passthrough, Reason: "parse", RawBytes: len(req.Body), SentBytes: len(req.Body)}
	}}
	h, _ := testHandler(t, fc, nil)
	r := newRequest(http.MethodPost, chatPath, bytes.NewReader(orig))
	w, s := serve(t, h, r)
	if !bytes.Equal(s.body, orig) || !bytes.Equal(s.getBody, orig) || s.cl != int64(len(orig)) || s.clHeader != strconv.Itoa(len(orig)) {
		t.Fatalf("body %q getbody %q cl %d/%q", s.body, s.getBody, s.cl, s.clHeader)
	}
	if got, want := w.Header().Get(HeaderName), "passthrough=parse; raw_bytes=15; sent_bytes=15; receipts=0; tokens=none"; got != want {
		t.Fatalf("header %q, want %q", got, want)
	}
}

func TestEmptyBodyCandidate(t *testing.T) {
	fc := &fakeCompiler{}
	h, _ := testHandler(t, fc, nil)
	r := newRequest(http.MethodPost, chatPath, http.NoBody)
	w, s := serve(t, h, r)
	if len(s.body) != 0 || s.cl != 0 {
		t.Fatalf("body %q cl %d", s.body, s.cl)
	}
	if got := w.Header().Get(HeaderName); got != "passthrough=no_slots; raw_bytes=0; sent_bytes=0; receipts=0; tokens=none" {
		t.Fatalf("header %q", got)
	}
}

func TestPanicFailsOpen(t *testing.T) {
	orig := []byte(`{"messages":[]}`)
	for _, v := range []any{"boom", errors.New("x"), 42} {
		fc := &fakeCompiler{fn: func(context.Context, compiler.Request) compiler.Result { panic(v) }}
		h, logs := testHandler(t, fc, nil)
		r := newRequest(http.MethodPost, chatPath, bytes.NewReader(orig))
		w, s := serve(t, h, r)
		if !bytes.Equal(s.body, orig) {
			t.Fatalf("forwarded %q", s.body)
		}
		if got := w.Header().Get(HeaderName); !strings.HasPrefix(got, "passthrough=panic;") {
			t.Fatalf("header %q", got)
		}
		if logs.FilterMessageSnippet("panic").Len() != 1 {
			t.Fatal("panic not logged")
		}
		for _, e := range logs.All() {
			for k, f := range e.ContextMap() {
				if s, ok := f.(string); ok && strings.Contains(s, "boom") && k != "stack" {
					t.Fatalf("panic value leaked into log field %s", k)
				}
			}
		}
	}
}

func TestIndexOutOfRangePanicFailsOpen(t *testing.T) {
	fc := &fakeCompiler{fn: func(_ context.Context, req compiler.Request) compiler.Result {
		var a []int
		_ = a[len(req.Body)]
		return compiler.Result{}
	}}
	h, _ := testHandler(t, fc, nil)
	r := newRequest(http.MethodPost, chatPath, strings.NewReader("{}"))
	w, s := serve(t, h, r)
	if string(s.body) != "{}" || !strings.HasPrefix(w.Header().Get(HeaderName), "passthrough=panic") {
		t.Fatal("runtime panic not failed open")
	}
}

func TestShadowForwardsOriginal(t *testing.T) {
	orig := []byte(`{"model":"gpt-4o","messages":[           ]}`)
	fc := &fakeCompiler{fn: func(_ context.Context, req compiler.Request) compiler.Result {
		if req.Mode != compiler.ModeShadow {
			t.Errorf("mode %q", req.Mode)
		}
		return compiler.Result{Body: []byte(`{}`), Decision: compiler.Shadow, RawBytes: len(req.Body), SentBytes: 2, Receipts: 1,
			Tokens: compiler.TokenReport{Status: "none"}}
	}}
	h, _ := testHandler(t, fc, func(h *Gateway) { h.Mode = "shadow" })
	r := newRequest(http.MethodPost, chatPath, bytes.NewReader(orig))
	w, s := serve(t, h, r)
	if !bytes.Equal(s.body, orig) {
		t.Fatalf("shadow forwarded %q", s.body)
	}
	want := "shadow; raw_bytes=" + strconv.Itoa(len(orig)) + "; sent_bytes=2; receipts=1; tokens=none"
	if got := w.Header().Get(HeaderName); got != want {
		t.Fatalf("header %q, want %q", got, want)
	}
}

func TestScope(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string]string
		tenant  string
	}{
		{"no credential", nil, ""},
		{"authorization", map[string]string{"Authorization": "Bearer A", "x-api-key": "K"}, "t:8:A"},
		{"x-api-key", map[string]string{"x-api-key": "key-B"}, "t:5:B"},
		{"x-goog-api-key", map[string]string{"x-goog-api-key": "gkC"}, "t:3:C"},
		{"azure api-key", map[string]string{"api-key": "azD"}, "t:3:D"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := &fakeCompiler{}
			h, logs := testHandler(t, fc, nil)
			r := newRequest(http.MethodPost, chatPath, strings.NewReader("{}"))
			r.Header.Del("Authorization")
			for k, v := range tt.headers {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			s := &seen{}
			if err := h.ServeHTTP(w, r, recordNext(s)); err != nil {
				t.Fatal(err)
			}
			if tt.tenant == "" {
				// No credential: no cross-request state, the original goes out.
				if fc.calls.Load() != 0 || !strings.HasPrefix(w.Header().Get(HeaderName), "passthrough=no_tenant;") || string(s.body) != "{}" {
					t.Fatalf("no credential: %d compiles, header %q", fc.calls.Load(), w.Header().Get(HeaderName))
				}
				return
			}
			if fc.last.Scope.Tenant != tt.tenant || fc.last.Scope.Session != "" {
				t.Fatalf("scope %+v, want tenant %q", fc.last.Scope, tt.tenant)
			}
			for _, e := range logs.All() {
				for _, f := range e.Context {
					for _, v := range tt.headers {
						if f.String == v {
							t.Fatalf("credential logged in %s", f.Key)
						}
					}
				}
			}
		})
	}
}

func TestSessionPlaceholderHashed(t *testing.T) {
	fc := &fakeCompiler{}
	h, _ := testHandler(t, fc, func(h *Gateway) { h.Session = "{http.request.header.X-Session-Id}" })
	scopeFor := func(sid string) artifact.Scope {
		r := newRequest(http.MethodPost, chatPath, strings.NewReader("{}"))
		if sid != "" {
			r.Header.Set("X-Session-Id", sid)
		}
		if err := h.ServeHTTP(httptest.NewRecorder(), r, recordNext(&seen{})); err != nil {
			t.Fatal(err)
		}
		return fc.last.Scope
	}
	a1, a2, b, none := scopeFor("sess-A"), scopeFor("sess-A"), scopeFor("sess-B"), scopeFor("")
	if a1.Session == "" || a1.Session != a2.Session || a1.Session == b.Session {
		t.Fatalf("sessions %q %q %q", a1.Session, a2.Session, b.Session)
	}
	if strings.Contains(a1.Session, "sess-A") {
		t.Fatal("session value not hashed")
	}
	if none.Session != "" {
		t.Fatalf("missing header gave session %q", none.Session)
	}
}

func TestCompileTimeoutBoundsContext(t *testing.T) {
	fc := &fakeCompiler{fn: func(ctx context.Context, req compiler.Request) compiler.Result {
		<-ctx.Done()
		return compiler.Result{Body: req.Body, Decision: compiler.Passthrough, Reason: "timeout", RawBytes: len(req.Body), SentBytes: len(req.Body)}
	}}
	h, _ := testHandler(t, fc, func(h *Gateway) { h.CompileTimeout = 20 * time.Millisecond })
	r := newRequest(http.MethodPost, chatPath, strings.NewReader("{}"))
	w := httptest.NewRecorder()
	start := time.Now()
	var s seen
	if err := h.ServeHTTP(w, r, recordNext(&s)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("compile not bounded: %s", d)
	}
	if string(s.body) != "{}" || !strings.HasPrefix(w.Header().Get(HeaderName), "passthrough=timeout") {
		t.Fatalf("body %q header %q", s.body, w.Header().Get(HeaderName))
	}
}

func TestHeaderFormat(t *testing.T) {
	tests := []struct {
		rep  outcome
		want string
	}{
		{outcome{decision: compiler.Accepted, rawBytes: 10, sentBytes: 5, receipts: 1}, "accepted; raw_bytes=10; sent_bytes=5; receipts=1; tokens=none"},
		{outcome{decision: compiler.Accepted, rawBytes: 10, sentBytes: 5, receipts: 1, tokens: compiler.TokenReport{Status: "exact", Raw: 7, Sent: 3}},
			"accepted; raw_bytes=10; sent_bytes=5; receipts=1; raw_tokens=7; sent_tokens=3"},
		{outcome{decision: compiler.Accepted, rawBytes: 10, sentBytes: 5, receipts: 1, tokens: compiler.TokenReport{Status: "estimate", Raw: 7, Sent: 3}},
			"accepted; raw_bytes=10; sent_bytes=5; receipts=1; raw_tokens=7; sent_tokens=3; tokens=estimate"},
		{outcome{decision: compiler.Passthrough, reason: "gate", rawBytes: 10, sentBytes: 10, tokens: compiler.TokenReport{Status: "none"}},
			"passthrough=gate; raw_bytes=10; sent_bytes=10; receipts=0; tokens=none"},
		{outcome{decision: compiler.Passthrough, reason: "gate", rawBytes: 10, sentBytes: 10, tokens: compiler.TokenReport{Status: "budget"}},
			"passthrough=gate; raw_bytes=10; sent_bytes=10; receipts=0; tokens=budget"},
		{outcome{decision: compiler.Shadow, rawBytes: 10, sentBytes: 4, receipts: 2}, "shadow; raw_bytes=10; sent_bytes=4; receipts=2; tokens=none"},
		{outcome{rawBytes: 1, sentBytes: 1}, "passthrough=unspecified; raw_bytes=1; sent_bytes=1; receipts=0; tokens=none"},
	}
	for _, tt := range tests {
		if got := tt.rep.header(); got != tt.want {
			t.Errorf("got  %q\nwant %q", got, tt.want)
		}
	}
}

func TestReadAtMost(t *testing.T) {
	for _, tc := range []struct {
		n, limit, hint int64
		over           bool
	}{
		{0, 10, 0, false}, {0, 10, -1, false}, {10, 10, 10, false}, {10, 10, -1, false},
		{11, 10, -1, true}, {5000, 10, -1, true}, {5000, 8000, -1, false}, {5000, 8000, 5000, false},
		{5000, 8000, 100, false}, // a lying Content-Length hint only sizes the buffer
	} {
		data := bytes.Repeat([]byte("a"), int(tc.n))
		buf, over, busy, err := readAtMost(bytes.NewReader(data), tc.limit, tc.hint, nil)
		if err != nil || over != tc.over || busy {
			t.Fatalf("%+v: over=%v err=%v", tc, over, err)
		}
		want := tc.n
		if tc.over {
			want = tc.limit + 1
		}
		if int64(len(buf)) != want {
			t.Fatalf("%+v: read %d, want %d", tc, len(buf), want)
		}
	}
}

// While the handler holds max_buffered_bytes of bodies, further candidates
// stream through untouched (passthrough=busy); the share comes back when
// the upstream is done with a body.
func TestMaxBufferedBytes(t *testing.T) {
	fc := &fakeCompiler{}
	// 55 bytes (54 and the byte that sees EOF) per body, and 4× that while
	// it compiles (admission.go): one request compiles in 300, two do not.
	h, _ := testHandler(t, fc, func(h *Gateway) { h.MaxBufferedBytes = 300 })
	body := `{"messages":[` + strings.Repeat(" ", 40) + `]}` // 54 bytes
	held := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		r := newRequest(http.MethodPost, chatPath, strings.NewReader(body))
		done <- h.ServeHTTP(httptest.NewRecorder(), r, Next(func(w http.ResponseWriter, r *http.Request) error {
			close(held)
			<-release
			return nil
		}))
	}()
	<-held // 55 of 300 bytes held

	var s seen
	w := httptest.NewRecorder()
	r := newRequest(http.MethodPost, chatPath, strings.NewReader(body))
	if err := h.ServeHTTP(w, r, recordNext(&s)); err != nil {
		t.Fatal(err)
	}
	if tt := w.Header().Get(HeaderName); !strings.HasPrefix(tt, "passthrough=busy;") || string(s.body) != body {
		t.Fatalf("second request: %q, body %q", tt, s.body)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := h.Buffered.Load(); n != 0 {
		t.Fatalf("%d bytes still counted as held", n)
	}
	// With the budget free again, a candidate is compiled.
	w = httptest.NewRecorder()
	if err := h.ServeHTTP(w, newRequest(http.MethodPost, chatPath, strings.NewReader(body)), recordNext(&seen{})); err != nil {
		t.Fatal(err)
	}
	if tt := w.Header().Get(HeaderName); strings.HasPrefix(tt, "passthrough=busy") {
		t.Fatalf("after release: %q", tt)
	}
}

// A rewrite refused by the validity check is logged with the running count,
// so an operator can alert on it.
func TestInvalidOutputLogged(t *testing.T) {
	fc := &fakeCompiler{fn: func(_ context.Context, req compiler.Request) compiler.Result {
		return compiler.Result{Body: req.Body, Decision: compiler.Passthrough, Reason: compiler.ReasonInvalidOutput, RawBytes: len(req.Body), SentBytes: len(req.Body)}
	}}
	h, logs := testHandler(t, fc, nil)
	h.Metrics.failOpen.WithLabelValues(string(compiler.ReasonInvalidOutput)).Add(2) // two before
	if err := h.ServeHTTP(httptest.NewRecorder(), newRequest(http.MethodPost, chatPath, strings.NewReader("{}")), recordNext(&seen{})); err != nil {
		t.Fatal(err)
	}
	entries := logs.All()
	if len(entries) != 1 || entries[0].ContextMap()["invalid_outputs_total"] != uint64(3) {
		t.Fatalf("log: %+v", entries)
	}
	if n := h.Metrics.failOpenTotal(compiler.ReasonInvalidOutput); n != 3 {
		t.Fatalf("owner counts %d invalid outputs, want 3", n)
	}
}

// serve runs one request through h to a recording next handler.
func serve(t *testing.T, h *Gateway, r *http.Request) (*httptest.ResponseRecorder, *seen) {
	t.Helper()
	w := httptest.NewRecorder()
	s := &seen{}
	if err := h.ServeHTTP(w, r, recordNext(s)); err != nil {
		t.Fatal(err)
	}
	return w, s
}

// The log line's status is the one the client got: an upstream that cannot
// be reached is logged as reverse_proxy's 502 (Caddy's error handling
// writes it after the handler returns), not as 0.
func TestUpstreamFailureStatusLogged(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want int64
	}{
		{"unreachable upstream", caddyhttp.Error(http.StatusBadGateway, errors.New("dial tcp: connection refused")), 502},
		{"timeout", caddyhttp.Error(http.StatusGatewayTimeout, errors.New("i/o timeout")), 504},
		{"plain error", errors.New("boom"), 500},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, logs := testHandler(t, &fakeCompiler{}, nil)
			next := Next(func(w http.ResponseWriter, r *http.Request) error {
				_, _ = io.ReadAll(r.Body)
				return tt.err
			})
			if err := h.ServeHTTP(httptest.NewRecorder(), newRequest(http.MethodPost, chatPath, strings.NewReader("{}")), next); err == nil {
				t.Fatal("the next handler's error was not returned")
			}
			entries := logs.FilterMessage("request").All()
			if len(entries) != 1 {
				t.Fatalf("%d request lines", len(entries))
			}
			if got := entries[0].ContextMap()["status"]; got != tt.want {
				t.Fatalf("logged status %v, want %d", got, tt.want)
			}
		})
	}
}

// The header carries this request's cost figures and the third veto's
// horizon figures, named apart: an accepted request may cost more now
// than the original (cost_sent > cost_raw) while the horizon figures show
// it cheaper; without a cost model neither appears.
func TestCostHeaderFigures(t *testing.T) {
	for _, tt := range []struct {
		rep  outcome
		want string
	}{
		{outcome{decision: compiler.Accepted, rawBytes: 10, sentBytes: 5, receipts: 1,
			costRaw: 100, costSent: 120.4, costHorizonRaw: 500, costHorizonSent: 450.6, costHorizon: 4},
			"accepted; raw_bytes=10; sent_bytes=5; receipts=1; tokens=none; cost_raw=100; cost_sent=120; cost_horizon_raw=500; cost_horizon_sent=451"},
		{outcome{decision: compiler.Accepted, rawBytes: 10, sentBytes: 5, receipts: 1},
			"accepted; raw_bytes=10; sent_bytes=5; receipts=1; tokens=none"},
	} {
		if got := tt.rep.header(); got != tt.want {
			t.Errorf("got  %q\nwant %q", got, tt.want)
		}
	}
}

// A plain http.Handler is a next handler too: a candidate reaches it
// rewired and reported, as it reaches Caddy's.
func TestPlainHandlerNext(t *testing.T) {
	h, _ := testHandler(t, &fakeCompiler{}, nil)
	var got []byte
	next := HandlerNext(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	w := httptest.NewRecorder()
	if err := h.ServeHTTP(w, newRequest(http.MethodPost, chatPath, strings.NewReader(`{"messages":[]}`)), next); err != nil {
		t.Fatal(err)
	}
	// no_slots is the fake compiler's answer.
	if string(got) != `{"messages":[]}` || !strings.HasPrefix(w.Header().Get(HeaderName), "passthrough=no_slots;") {
		t.Fatalf("upstream got %q, header %q", got, w.Header().Get(HeaderName))
	}
}
