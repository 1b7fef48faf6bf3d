package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// committingCompiler returns a compile whose commit counts its calls.
func committingCompiler(commits *atomic.Int32) *fakeCompiler {
	return &fakeCompiler{fn: func(_ context.Context, req compiler.Request) compiler.Result {
		if !req.DeferCommit {
			panic("handler did not defer the commit")
		}
		return compiler.Result{Body: []byte(`{}`), Decision: compiler.Accepted, RawBytes: len(req.Body), SentBytes: 2, Receipts: 1,
			Commit: func() { commits.Add(1) }}
	}}
}

// The lineage is committed only when the provider answered 2xx; an error
// status, an upstream error (reset) or a client abort records nothing, and
// the log line (written after the response) says what happened.
func TestCommitOnlyWhenProviderAccepts(t *testing.T) {
	body := `{"messages":[                                ]}`
	tests := []struct {
		name    string
		next    func(w http.ResponseWriter, r *http.Request) error
		cancel  bool // the client goes away while upstream runs
		commit  bool
		status  int
		outcome string
	}{
		{"200", func(w http.ResponseWriter, r *http.Request) error { _, err := io.WriteString(w, "{}"); return err }, false, true, 200, ""},
		{"201 explicit", func(w http.ResponseWriter, r *http.Request) error { w.WriteHeader(201); return nil }, false, true, 201, ""},
		{"100 then 200", func(w http.ResponseWriter, r *http.Request) error { w.WriteHeader(100); w.WriteHeader(200); return nil }, false, true, 200, ""},
		{"429", func(w http.ResponseWriter, r *http.Request) error { w.WriteHeader(429); return nil }, false, false, 429, ""},
		{"500", func(w http.ResponseWriter, r *http.Request) error { w.WriteHeader(500); return nil }, false, false, 500, ""},
		{"reset", func(w http.ResponseWriter, r *http.Request) error {
			return caddyhttp.Error(http.StatusBadGateway, errors.New("connection reset by peer"))
		}, false, false, 502, "error"}, // the status the client got (issue 31)
		{"client abort", func(w http.ResponseWriter, r *http.Request) error {
			<-r.Context().Done()
			return r.Context().Err()
		}, true, false, 499, string(ReasonClientAbort)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var commits atomic.Int32
			h, logs := testHandler(t, committingCompiler(&commits), nil)
			r := newRequest(http.MethodPost, chatPath, strings.NewReader(body))
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			r = r.WithContext(ctx)
			next := Next(func(w http.ResponseWriter, r *http.Request) error {
				if tt.cancel {
					cancel()
				}
				return tt.next(w, r)
			})
			_ = h.ServeHTTP(httptest.NewRecorder(), r, next)
			if got := commits.Load() == 1; got != tt.commit {
				t.Fatalf("committed %v, want %v", got, tt.commit)
			}
			if !tt.commit && h.Stats.Uncommitted.Load() != 1 {
				t.Fatal("uncommitted request not counted")
			}
			e := logs.All()
			if len(e) != 1 {
				t.Fatalf("%d log lines", len(e))
			}
			m := e[0].ContextMap()
			if m["status"] != int64(tt.status) || m["committed"] != tt.commit {
				t.Fatalf("log status %v committed %v, want %d %v", m["status"], m["committed"], tt.status, tt.commit)
			}
			if o, _ := m["outcome"].(string); o != tt.outcome {
				t.Fatalf("log outcome %q, want %q", o, tt.outcome)
			}
			if _, ok := m["upstream_ms"]; !ok {
				t.Fatal("log line lacks upstream_ms")
			}
		})
	}
}

// A compile the client abandoned is reported as client_abort, not timeout.
func TestClientAbortNotTimeout(t *testing.T) {
	fc := &fakeCompiler{fn: func(ctx context.Context, req compiler.Request) compiler.Result {
		<-ctx.Done()
		return compiler.Result{Body: req.Body, Decision: compiler.Passthrough, Reason: compiler.ReasonTimeout}
	}}
	h, _ := testHandler(t, fc, nil)
	r := newRequest(http.MethodPost, chatPath, strings.NewReader("{}"))
	ctx, cancel := context.WithCancel(r.Context())
	cancel()
	w := httptest.NewRecorder()
	_ = h.ServeHTTP(w, r.WithContext(ctx), recordNext(&seen{}))
	if got := w.Header().Get(HeaderName); !strings.HasPrefix(got, "passthrough=client_abort;") {
		t.Fatalf("header %q", got)
	}
}

// fakeReader stands in for response.Reader: it records what it was fed and
// reports a fixed usage once it has seen the end of the body.
type fakeReader struct {
	got strings.Builder
}

func (f *fakeReader) Write(p []byte) (int, error) { f.got.Write(p); return len(p), nil }
func (f *fakeReader) Complete() bool              { return strings.HasSuffix(f.got.String(), "[DONE]\n\n") }
func (f *fakeReader) Usage() provider.Usage {
	if !strings.HasSuffix(f.got.String(), "[DONE]\n\n") {
		return provider.Usage{}
	}
	return provider.Usage{Input: 10, Output: 3, CacheRead: 7, CacheWrite: 1, Known: true}
}

// The client's bytes are teed into the response reader as they stream
// (every Flush reaches the client at once), and usage lands in the log.
func TestResponseTeedAndUsageLogged(t *testing.T) {
	var readers []*fakeReader
	var formats []provider.Format
	var streams []bool
	saved := newResponseReader
	newResponseReader = func(format provider.Format, stream bool) responseReader {
		f := &fakeReader{}
		readers, formats, streams = append(readers, f), append(formats, format), append(streams, stream)
		return f
	}
	t.Cleanup(func() { newResponseReader = saved })

	var commits atomic.Int32
	h, logs := testHandler(t, committingCompiler(&commits), nil)
	events := []string{"data: {\"a\":1}\n\n", "data: {\"b\":2}\n\n", "data: [DONE]\n\n"}
	w := httptest.NewRecorder()
	next := Next(func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i, ev := range events {
			if _, err := io.WriteString(w, ev); err != nil {
				return err
			}
			if err := rc.Flush(); err != nil {
				return err
			}
			if i == 0 && !wFlushed(w) {
				t.Error("first event not flushed through to the client")
			}
			// Committed exactly when the terminal event went through: a
			// client acting on it finds the request recorded.
			if got, want := commits.Load(), int32(0); i == len(events)-1 {
				want = 1
				if got != want {
					t.Errorf("after the terminal event: %d commits, want %d", got, want)
				}
			} else if got != want {
				t.Errorf("after event %d: %d commits, want %d", i, got, want)
			}
		}
		// ReadFrom must be teed too.
		_, err := io.Copy(w, strings.NewReader(""))
		return err
	})
	if err := h.ServeHTTP(w, newRequest(http.MethodPost, chatPath, strings.NewReader("{}")), next); err != nil {
		t.Fatal(err)
	}
	want := strings.Join(events, "")
	if w.Body.String() != want || len(readers) != 1 || readers[0].got.String() != want || formats[0] != "openai_chat" || !streams[0] {
		t.Fatalf("client got %q, reader got %q (%v, stream %v)", w.Body.String(), readers[0].got.String(), formats, streams)
	}
	m := logs.All()[0].ContextMap()
	if m["usage_input"] != int64(10) || m["usage_output"] != int64(3) || m["usage_cache_read"] != int64(7) || m["usage_cache_write"] != int64(1) {
		t.Fatalf("usage not logged: %v", m)
	}
	if m["response_bytes"] != int64(len(want)) {
		t.Fatalf("response_bytes %v", m["response_bytes"])
	}
}

// wFlushed reports whether the recorder under w was flushed.
func wFlushed(w http.ResponseWriter) bool {
	for {
		switch x := w.(type) {
		case *httptest.ResponseRecorder:
			return x.Flushed
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return false
		}
	}
}

// hijackRecorder is a ResponseWriter that can be hijacked.
type hijackRecorder struct {
	*httptest.ResponseRecorder
	hijacked bool
}

func (h *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h.hijacked = true
	return nil, nil, nil
}

// Hijack (WebSocket upgrades) stays reachable through the response tap.
func TestTapKeepsHijack(t *testing.T) {
	var commits atomic.Int32
	h, _ := testHandler(t, committingCompiler(&commits), nil)
	w := &hijackRecorder{ResponseRecorder: httptest.NewRecorder()}
	next := Next(func(w http.ResponseWriter, r *http.Request) error {
		_, _, err := http.NewResponseController(w).Hijack()
		return err
	})
	if err := h.ServeHTTP(w, newRequest(http.MethodPost, chatPath, strings.NewReader("{}")), next); err != nil {
		t.Fatal(err)
	}
	if !w.hijacked {
		t.Fatal("hijack did not reach the connection")
	}
}

// A WebSocket upgrade on a provider path passes through uncompiled and is
// counted and logged; other upgrades are not.
func TestWebSocketUpgradeCounted(t *testing.T) {
	fc := &fakeCompiler{}
	h, logs := testHandler(t, fc, nil)
	for _, path := range []string{chatPath, "/socket"} {
		r := newRequest(http.MethodGet, path, nil)
		r.Header.Set("Upgrade", "websocket")
		r.Header.Set("Connection", "Upgrade")
		if _, s := serve(t, h, r); s.calls != 1 {
			t.Fatal("upgrade not passed on")
		}
	}
	if fc.calls.Load() != 0 || testutil.ToFloat64(h.Metrics.upgrades.WithLabelValues("openai_chat")) != 1 {
		t.Fatalf("compiles %d, upgrades %v", fc.calls.Load(), testutil.ToFloat64(h.Metrics.upgrades.WithLabelValues("openai_chat")))
	}
	e := logs.All()
	if len(e) != 1 || e[0].ContextMap()["websocket"] != true || e[0].ContextMap()["format"] != "openai_chat" {
		t.Fatalf("log: %+v", e)
	}
}

// The decision placeholders are set for handlers after ours and access logs.
func TestPlaceholders(t *testing.T) {
	var commits atomic.Int32
	h, _ := testHandler(t, committingCompiler(&commits), nil)
	body := `{"messages":[          ]}`
	r := newRequest(http.MethodPost, chatPath, strings.NewReader(body))
	var got map[string]string
	next := Next(func(w http.ResponseWriter, r *http.Request) error {
		repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
		got = map[string]string{}
		for _, k := range []string{PlaceholderDecision, PlaceholderReason, PlaceholderRawBytes, PlaceholderSentBytes, PlaceholderReceipts} {
			got[k] = repl.ReplaceAll("{"+k+"}", "-")
		}
		return nil
	})
	if err := h.ServeHTTP(httptest.NewRecorder(), r, next); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{PlaceholderDecision: "accepted", PlaceholderReason: "-", PlaceholderRawBytes: "25", PlaceholderSentBytes: "2", PlaceholderReceipts: "1"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

// reverse_proxy aborts a response that broke mid-stream with
// panic(http.ErrAbortHandler): nothing is committed, the log line is still
// written, and the panic goes on to the server.
func TestAbortedResponseNotCommitted(t *testing.T) {
	var commits atomic.Int32
	h, logs := testHandler(t, committingCompiler(&commits), nil)
	next := Next(func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "data: {\"partial\":")
		panic(http.ErrAbortHandler)
	})
	func() {
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Fatalf("recovered %v, want http.ErrAbortHandler", v)
			}
		}()
		_ = h.ServeHTTP(httptest.NewRecorder(), newRequest(http.MethodPost, chatPath, strings.NewReader("{}")), next)
	}()
	if commits.Load() != 0 {
		t.Fatal("an aborted response was committed")
	}
	e := logs.All()
	if len(e) != 1 || e[0].ContextMap()["outcome"] != "aborted" || e[0].ContextMap()["status"] != int64(200) {
		t.Fatalf("log: %+v", e)
	}
}

// The real response reader is wired in: a plain JSON answer's usage lands
// in the log (Anthropic's input counts its cache reads and writes too: 11 +
// 5 + 2), and the compiler is handed it for cost calibration; an error
// answer is not read at all.
func TestResponseUsageFromProvider(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		body    string
		logged  bool
		observe int
	}{
		{"anthropic json", http.StatusOK, `{"type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":11,"cache_read_input_tokens":5,"cache_creation_input_tokens":2,"output_tokens":4}}`, true, 1},
		{"error status", http.StatusTooManyRequests, `{"type":"error","error":{"type":"rate_limit_error"},"usage":{"input_tokens":11}}`, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var commits atomic.Int32
			h, logs := testHandler(t, committingCompiler(&commits), nil)
			var seen []provider.Usage
			h.FormatFor = compiler.FormatFor
			h.Observe = func(_ compiler.Result, u provider.Usage) { seen = append(seen, u) }
			next := Next(func(w http.ResponseWriter, r *http.Request) error {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				_, err := io.WriteString(w, tt.body)
				return err
			})
			w := httptest.NewRecorder()
			if err := h.ServeHTTP(w, newRequest(http.MethodPost, "/v1/messages", strings.NewReader("{}")), next); err != nil {
				t.Fatal(err)
			}
			m := logs.All()[0].ContextMap()
			_, has := m["usage_input"]
			if has != tt.logged || len(seen) != tt.observe {
				t.Fatalf("usage logged %v (want %v), observed %d (want %d): %v", has, tt.logged, len(seen), tt.observe, m)
			}
			if tt.logged && (m["usage_input"] != int64(18) || m["usage_cache_read"] != int64(5) || m["usage_cache_write"] != int64(2) || m["usage_output"] != int64(4)) {
				t.Fatalf("usage %v", m)
			}
			if tt.observe > 0 && (seen[0].Input != 18 || seen[0].CacheRead != 5) {
				t.Fatalf("observed %+v", seen[0])
			}
		})
	}
}
