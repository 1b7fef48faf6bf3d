package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
)

// rewritingCompiler accepts every request and replaces its run of 'A's by
// one 'A': a rewrite that differs from the original only there.
func rewritingCompiler(seen *[]byte) *fakeCompiler {
	return &fakeCompiler{fn: func(_ context.Context, req compiler.Request) compiler.Result {
		*seen = bytes.Clone(req.Body)
		i := bytes.IndexByte(req.Body, 'A')
		j := bytes.LastIndexByte(req.Body, 'A')
		if i < 0 {
			return compiler.Result{Body: req.Body, Decision: compiler.Passthrough, Reason: compiler.ReasonNoSlots, RawBytes: len(req.Body), SentBytes: len(req.Body)}
		}
		out := append(bytes.Clone(req.Body[:i+1]), req.Body[j+1:]...)
		return compiler.Result{Body: out, Decision: compiler.Accepted, Format: "openai_chat", RawBytes: len(req.Body), SentBytes: len(out), Receipts: 1, Slots: 1}
	}}
}

func mustEncode(t testing.TB, coding string, b []byte) []byte {
	t.Helper()
	e, err := encodeBody(coding, b)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// An encoded request body is decoded for the compiler, and the rewrite goes
// upstream encoded in the client's coding with a consistent length; the
// coding's token is matched without regard to case.
func TestEncodedBodyCompiledAndReencoded(t *testing.T) {
	plain := []byte(`{"model":"m","messages":[{"role":"tool","content":"` + strings.Repeat("A", 5000) + `"}]}`)
	want := []byte(`{"model":"m","messages":[{"role":"tool","content":"A"}]}`)
	for _, ce := range []string{"zstd", "gzip", "br", "ZSTD", "x-gzip"} {
		t.Run(ce, func(t *testing.T) {
			coding, _ := requestCoding(&http.Request{Header: http.Header{"Content-Encoding": {ce}}})
			wire := mustEncode(t, coding, plain)
			var got []byte
			fc := rewritingCompiler(&got)
			h, logs := testHandler(t, fc, nil)
			r := newRequest(http.MethodPost, chatPath, bytes.NewReader(wire))
			r.Header.Set("Content-Encoding", ce)
			w, s := serve(t, h, r)
			if !bytes.Equal(got, plain) {
				t.Fatalf("compiler read %d bytes, not the decoded body", len(got))
			}
			if s.cl != int64(len(s.body)) || s.clHeader != strconv.Itoa(len(s.body)) {
				t.Fatalf("content length %d / %q for %d bytes", s.cl, s.clHeader, len(s.body))
			}
			if !bytes.Equal(s.getBody, s.body) {
				t.Fatal("GetBody differs from the body")
			}
			dec, err := decodeBody(coding, s.body, 1<<20)
			if err != nil {
				t.Fatalf("upstream body does not decode as %s: %v", coding, err)
			}
			if !bytes.Equal(dec, want) {
				t.Fatalf("upstream decoded %q", dec)
			}
			if again := mustEncode(t, coding, want); !bytes.Equal(again, s.body) {
				t.Fatal("the re-encoded rewrite is not deterministic")
			}
			wantHdr := "accepted; raw_bytes=" + strconv.Itoa(len(wire)) + "; sent_bytes=" + strconv.Itoa(len(s.body))
			if got := w.Header().Get(HeaderName); !strings.HasPrefix(got, wantHdr) {
				t.Fatalf("header %q, want prefix %q", got, wantHdr)
			}
			if logs.Len() != 1 || logs.All()[0].ContextMap()["decision"] != "accepted" {
				t.Fatalf("log %v", logs.All())
			}
		})
	}
}

// The header the handler's next handler sees keeps the coding of the body.
func TestEncodedBodyHeaderKept(t *testing.T) {
	plain := []byte(`{"x":"` + strings.Repeat("A", 100) + `"}`)
	var got []byte
	h, _ := testHandler(t, rewritingCompiler(&got), nil)
	r := newRequest(http.MethodPost, chatPath, bytes.NewReader(mustEncode(t, "zstd", plain)))
	r.Header.Set("Content-Encoding", "zstd")
	var ce string
	var body []byte
	next := func(w http.ResponseWriter, r *http.Request) error {
		ce = r.Header.Get("Content-Encoding")
		body, _ = io.ReadAll(r.Body)
		return nil
	}
	if err := h.ServeHTTP(httptest.NewRecorder(), r, next); err != nil {
		t.Fatal(err)
	}
	if ce != "zstd" {
		t.Fatalf("Content-Encoding %q upstream", ce)
	}
	if dec, err := decodeBody("zstd", body, 1<<20); err != nil || string(dec) != `{"x":"A"}` {
		t.Fatalf("upstream %q, %v", dec, err)
	}
}

// A body the compiler passes through, one that does not decode, and a
// decompression bomb all go upstream as the client's bytes, with the
// reason logged; the bomb is never compiled.
func TestEncodedBodyPassthrough(t *testing.T) {
	bomb := mustEncode(t, "zstd", make([]byte, 4<<20))
	gzBomb := mustEncode(t, "gzip", make([]byte, 4<<20))
	brBomb := mustEncode(t, "br", make([]byte, 4<<20))
	for _, tc := range []struct {
		name, ce string
		wire     []byte
		compiled bool
		reason   string
	}{
		{"declined", "gzip", mustEncode(t, "gzip", []byte(`{"messages":[]}`)), true, "no_candidates"},
		{"corrupt zstd", "zstd", []byte("\x28\xb5\x2f\xfd garbage"), false, "content_encoding"},
		{"corrupt gzip", "gzip", []byte("\x1f\x8bnot gzip"), false, "content_encoding"},
		{"truncated br", "br", mustEncode(t, "br", []byte(strings.Repeat("AB", 4000)))[:20], false, "content_encoding"},
		{"zstd bomb", "zstd", bomb, false, "content_encoding"},
		{"gzip bomb", "gzip", gzBomb, false, "content_encoding"},
		{"br bomb", "br", brBomb, false, "content_encoding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []byte
			fc := rewritingCompiler(&got)
			h, logs := testHandler(t, fc, func(h *Gateway) { h.MaxBodySize = 1 << 20 })
			r := newRequest(http.MethodPost, chatPath, bytes.NewReader(tc.wire))
			r.Header.Set("Content-Encoding", tc.ce)
			w, s := serve(t, h, r)
			if !bytes.Equal(s.body, tc.wire) {
				t.Fatal("upstream did not get the client's bytes")
			}
			if s.cl != int64(len(tc.wire)) {
				t.Fatalf("content length %d", s.cl)
			}
			if (fc.calls.Load() == 1) != tc.compiled {
				t.Fatalf("compiled %d times", fc.calls.Load())
			}
			if got := w.Header().Get(HeaderName); !strings.HasPrefix(got, "passthrough="+tc.reason+";") {
				t.Fatalf("header %q", got)
			}
			if logs.Len() != 1 || logs.All()[0].ContextMap()["reason"] != tc.reason {
				t.Fatalf("log %v", logs.All())
			}
			if !tc.compiled {
				if d, _ := logs.All()[0].ContextMap()["detail"].(string); d == "" {
					t.Fatal("no detail logged for the decode failure")
				}
			}
		})
	}
}

// A bomb is bounded by max_body_size, not by what the frame claims.
func TestDecodeBodyBound(t *testing.T) {
	for _, c := range []string{codingZstd, codingGzip, codingBrotli} {
		b := mustEncode(t, c, make([]byte, 1000))
		if _, err := decodeBody(c, b, 999); err == nil {
			t.Fatalf("%s: 1000 bytes within 999: %v", c, err)
		}
		if d, err := decodeBody(c, b, 1000); err != nil || len(d) != 1000 {
			t.Fatalf("%s: 1000 bytes within 1000: %d %v", c, len(d), err)
		}
	}
}

func FuzzDecodeBody(f *testing.F) {
	for _, c := range []string{codingZstd, codingGzip, codingBrotli} {
		f.Add(c, mustEncode(f, c, []byte(`{"input":[]}`)))
	}
	f.Fuzz(func(t *testing.T, coding string, b []byte) {
		d, err := decodeBody(coding, b, 1<<16)
		if err == nil && len(d) > 1<<16 {
			t.Fatalf("decoded %d bytes past the bound", len(d))
		}
	})
}
