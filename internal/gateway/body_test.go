package gateway

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// trickle gives head, then blocks until release is closed, then gives tail.
type trickle struct {
	head, tail string
	release    chan struct{}
	stage      int
}

func (t *trickle) Read(p []byte) (int, error) {
	switch t.stage {
	case 0:
		t.stage++
		return copy(p, t.head), nil
	case 1:
		<-t.release
		t.stage++
		return copy(p, t.tail), nil
	}
	return 0, io.EOF
}

// A body slower than body_read_timeout streams through untouched
// (passthrough=slow_body): upstream gets every byte, the compiler none.
func TestBodyReadTimeout(t *testing.T) {
	for _, declared := range []bool{true, false} {
		name := "chunked"
		if declared {
			name = "content-length"
		}
		t.Run(name, func(t *testing.T) {
			fc := &fakeCompiler{}
			h, _ := testHandler(t, fc, func(h *Gateway) { h.BodyReadTimeout = 50 * time.Millisecond })
			body := &trickle{head: `{"messages":[`, tail: `]}`, release: make(chan struct{})}
			r := newRequest(http.MethodPost, chatPath, nil)
			r.Body = io.NopCloser(body)
			r.ContentLength = -1
			if declared {
				r.ContentLength = 15
			}
			start := time.Now()
			var s seen
			w := httptest.NewRecorder()
			next := func(w http.ResponseWriter, r *http.Request) error {
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("handler waited %s for a slow body", d)
				}
				close(body.release)
				return recordNext(&s)(w, r)
			}
			if err := h.ServeHTTP(w, r, Next(next)); err != nil {
				t.Fatal(err)
			}
			if got := w.Header().Get(HeaderName); !strings.HasPrefix(got, "passthrough=slow_body;") {
				t.Fatalf("header %q", got)
			}
			if string(s.body) != `{"messages":[]}` || fc.calls.Load() != 0 {
				t.Fatalf("upstream got %q, %d compiles", s.body, fc.calls.Load())
			}
			if n := h.Buffered.Load(); n != 0 {
				t.Fatalf("%d bytes still reserved", n)
			}
		})
	}
	t.Run("fast body compiled", func(t *testing.T) {
		fc := &fakeCompiler{}
		h, _ := testHandler(t, fc, func(h *Gateway) { h.BodyReadTimeout = time.Second })
		r := newRequest(http.MethodPost, chatPath, strings.NewReader(`{"messages":[]}`))
		r.ContentLength = -1
		if _, s := serve(t, h, r); string(s.body) != `{"messages":[]}` || fc.calls.Load() != 1 {
			t.Fatalf("upstream got %q, %d compiles", s.body, fc.calls.Load())
		}
	})
}

// A body of unknown length reserves max_buffered_bytes as it grows, not
// the whole max_body_size: small chunked bodies compile under a budget
// smaller than max_body_size, and one that outgrows the budget streams
// through (busy) with every byte.
func TestUnknownLengthReservesAsItGrows(t *testing.T) {
	fc := &fakeCompiler{}
	h, _ := testHandler(t, fc, func(h *Gateway) { h.MaxBufferedBytes = 4096 }) // max_body_size 32 MiB
	small := `{"messages":[]}`
	r := newRequest(http.MethodPost, chatPath, io.NopCloser(strings.NewReader(small)))
	r.ContentLength = -1
	if w, s := serve(t, h, r); fc.calls.Load() != 1 || string(s.body) != small {
		t.Fatalf("small chunked body: %d compiles, header %q", fc.calls.Load(), w.Header().Get(HeaderName))
	}
	big := `{"messages":["` + strings.Repeat("x", 20000) + `"]}`
	r = newRequest(http.MethodPost, chatPath, io.NopCloser(strings.NewReader(big)))
	r.ContentLength = -1
	w, s := serve(t, h, r)
	if got := w.Header().Get(HeaderName); !strings.HasPrefix(got, "passthrough=busy;") || string(s.body) != big {
		t.Fatalf("big chunked body: header %q, upstream got %d bytes", got, len(s.body))
	}
	if n := h.Buffered.Load(); n != 0 {
		t.Fatalf("%d bytes still reserved", n)
	}
}

// Bodies read one after the other through the reused growth steps come
// out byte for byte, whatever the previous one left in the buffers: a
// declared length, a shorter or longer body than declared, none.
func TestReadAtMostReusesGrowthSteps(t *testing.T) {
	const limit = 4 << 20
	bodies := []struct {
		name     string
		n        int
		declared int64
	}{
		{"declared 1 MB", 1 << 20, 1 << 20},
		{"declared 700 KB", 700 << 10, 700 << 10},
		{"shorter than declared", 300 << 10, 1 << 20},
		{"longer than declared", 900 << 10, 200 << 10},
		{"undeclared", 600 << 10, -1},
		{"declared 1 MB again", 1 << 20, 1 << 20},
	}
	for i, b := range bodies {
		t.Run(b.name, func(t *testing.T) {
			src := bytes.Repeat([]byte{byte('a' + i)}, b.n)
			got, over, busy, err := readAtMostInto(bytes.NewReader(src), limit, b.declared, nil, nil)
			if err != nil || over || busy || !bytes.Equal(got, src) {
				t.Fatalf("read %d bytes (over %v, busy %v, err %v), want the %d sent", len(got), over, busy, err, len(src))
			}
		})
	}
}
