package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/tokens"
)

func TestBodyClass(t *testing.T) {
	for _, tc := range []struct {
		n            int64
		class        int
		wantCapacity int64
	}{
		{0, -1, 0},
		{1 << 16, -1, 1 << 16}, // small: not pooled
		{1<<16 + 1, 0, 1<<16 + 1<<13},
		{1<<17 + 1, 8, 1<<17 + 1<<14},
		{1<<20 + 1, 32, 1<<20 + 1<<17},
		{1<<20 + 1<<19, 35, 1<<20 + 1<<19},
		{1 << 21, 39, 1 << 21},
		{1<<21 + 1, -1, 1<<21 + 1}, // large: not kept around
	} {
		class, capacity := bodyClass(tc.n)
		if class != tc.class || capacity != tc.wantCapacity {
			t.Errorf("bodyClass(%d) = %d, %d; want %d, %d", tc.n, class, capacity, tc.class, tc.wantCapacity)
		}
	}
	prev := -1
	for n := int64(1<<16 + 1); n <= 1<<21; n += 4093 {
		class, capacity := bodyClass(n)
		if capacity < n || capacity > n+n/8 || class < prev || class >= len(freeBodies.lists) {
			t.Fatalf("bodyClass(%d) = %d, %d: outside [n, 1.125n] or out of order", n, class, capacity)
		}
		prev = class
	}
}

// Released buffers are kept within maxFreeBytes and handed out again.
func TestFreeBodiesBounded(t *testing.T) {
	var held []*bodyBuffer
	for range 4 * maxFreeBytes / (1 << 20) {
		held = append(held, newBodyBuffer(1<<19))
	}
	for _, o := range held {
		o.release()
		if freeBodies.bytes > maxFreeBytes {
			t.Fatalf("%d bytes kept free, more than %d", freeBodies.bytes, maxFreeBytes)
		}
	}
	kept := freeBodies.bytes
	if kept < maxFreeBytes/2 {
		t.Fatalf("only %d bytes kept free of %d released", kept, len(held)<<19)
	}
	o := newBodyBuffer(1 << 19)
	if o.mem == nil || freeBodies.bytes != kept-int64(cap(o.mem.b)) {
		t.Fatal("a free buffer of the class was not handed out again")
	}
	o.release()
}

// forcePoison makes sure released buffers are poisoned, also when the
// test binary runs benchmarks too.
func forcePoison(t *testing.T) {
	t.Helper()
	was := poisoning()
	poisonReleased.Store(true)
	t.Cleanup(func() { poisonReleased.Store(was) })
}

// poisoned reports whether every byte of b's array is the poison.
func poisoned(b []byte) bool {
	for _, c := range b[:cap(b)] {
		if c != poisonByte {
			return false
		}
	}
	return true
}

func filledBuffer(t *testing.T, n int, c byte) (*bodyBuffer, []byte) {
	t.Helper()
	forcePoison(t)
	o := newBodyBuffer(int64(n + 1))
	o.keep(append(o.b, bytes.Repeat([]byte{c}, n)...))
	if o.mem == nil {
		t.Fatal("a body of a size class was not pooled")
	}
	return o, o.b
}

// The bytes go back to the pool only when the handler, the compile and
// every reader are done, in any order; no reference comes back after.
func TestBodyBufferReleasedByLastHolder(t *testing.T) {
	for _, order := range [][]string{
		{"handler", "compile", "reader", "rewind"},
		{"reader", "rewind", "compile", "handler"},
		{"compile", "reader", "handler", "rewind"},
	} {
		t.Run(strings.Join(order, ","), func(t *testing.T) {
			o, b := filledBuffer(t, 100<<10, 'a')
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			setBody(r, o, b)
			compiling, _ := o.tryHold()
			rewound, err := r.GetBody()
			if err != nil {
				t.Fatal(err)
			}
			drop := map[string]func(){
				"handler": o.release,
				"compile": compiling,
				"reader":  func() { _, _ = io.Copy(io.Discard, r.Body) }, // to EOF
				"rewind":  func() { _ = rewound.Close() },
			}
			for i, who := range order {
				if poisoned(b) {
					t.Fatalf("released before %s was done", who)
				}
				if !bytes.Equal(b, bytes.Repeat([]byte{'a'}, 100<<10)) {
					t.Fatalf("changed before %s was done", who)
				}
				drop[who]()
				if i < len(order)-1 && o.refs.Load() == 0 {
					t.Fatalf("no reference left after %s, with %v still holding", who, order[i+1:])
				}
			}
			if !poisoned(b) {
				t.Fatal("not released once every holder was done")
			}
			if _, ok := o.tryHold(); ok {
				t.Fatal("a released buffer was held again")
			}
			if _, err := r.GetBody(); err == nil {
				t.Fatal("a rewind read a released buffer")
			}
			if n, err := rewound.Read(make([]byte, 10)); n != 0 || err == nil {
				t.Fatalf("a closed reader read %d bytes, %v", n, err)
			}
		})
	}
}

// A body that outgrew its declared length, or that was handed on through
// readers that hold nothing, never goes back to the pool.
func TestBodyBufferNotPooled(t *testing.T) {
	o, b := filledBuffer(t, 100<<10, 'a')
	o.keep(append(b, make([]byte, cap(b))...)) // grew: a new array
	o.release()
	if poisoned(b) {
		t.Fatal("a buffer that grew past its class was released into the pool")
	}
	o, b = filledBuffer(t, 100<<10, 'a')
	o.abandon()
	o.release()
	if poisoned(b) {
		t.Fatal("an abandoned buffer was released into the pool")
	}
}

// Readers still holding the body after the handler returned keep it: the
// transport's body writer and a compile abandoned at its timeout.
func TestBodyOutlivesHandler(t *testing.T) {
	forcePoison(t)
	body := strings.Repeat("b", 200<<10)
	for _, abandoned := range []bool{false, true} {
		t.Run(fmt.Sprintf("abandoned compile %v", abandoned), func(t *testing.T) {
			compileGo, compileSeen := make(chan struct{}), make(chan string, 1)
			fc := &fakeCompiler{fn: func(ctx context.Context, req compiler.Request) compiler.Result {
				res := compiler.Result{Body: req.Body, Decision: compiler.Passthrough, Reason: compiler.ReasonNoSlots, RawBytes: len(req.Body), SentBytes: len(req.Body)}
				if !abandoned {
					req.Done()
					return res
				}
				go func() { // reads the body after Compile returned
					<-compileGo
					seen := string(req.Body)
					req.Done()
					compileSeen <- seen
				}()
				res.Reason = compiler.ReasonTimeout
				return res
			}}
			h, _ := testHandler(t, fc, nil)
			var held io.ReadCloser
			var buf []byte
			next := Next(func(w http.ResponseWriter, r *http.Request) error {
				held = r.Body // read only after the handler returned
				buf = unsafe.Slice(unsafe.SliceData(fc.last.Body), cap(fc.last.Body))
				w.WriteHeader(http.StatusOK)
				return nil
			})
			r := newRequest(http.MethodPost, chatPath, strings.NewReader(body))
			if err := h.ServeHTTP(httptest.NewRecorder(), r, next); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(held)
			if err != nil || string(got) != body {
				t.Fatalf("the transport's reader read %d bytes (%v) after the handler returned", len(got), err)
			}
			_ = held.Close()
			if abandoned {
				if poisoned(buf) {
					t.Fatal("released while the abandoned compile still reads it")
				}
				close(compileGo)
				if s := <-compileSeen; s != body {
					t.Fatal("the abandoned compile read a changed body")
				}
			}
			if !poisoned(buf) {
				t.Fatal("not released when the last reader was done")
			}
		})
	}
}

// Through a real transport (net/http, as reverse_proxy uses) with
// concurrent requests of different bodies: an upstream that answers before
// it reads the body, and one that reads it at once. No forwarded byte is
// poison or another body's. (The transport cuts a write still unfinished
// when the answer is done, so a reader after the handler returned is
// proved by TestBodyOutlivesHandler.)
func TestPooledBodyThroughTransport(t *testing.T) {
	forcePoison(t)
	var mu sync.Mutex
	var bad []string
	var whole atomic.Int32
	done := make(chan struct{}, 64)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want := r.Header.Get("X-Want")
		if r.Header.Get("X-Early") == "1" {
			_ = http.NewResponseController(w).EnableFullDuplex() // read after answering
			w.Header().Set("Content-Length", "2")
			_, _ = w.Write([]byte("ok"))
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
		}
		var got bytes.Buffer
		chunk := make([]byte, 16<<10)
		for {
			n, err := r.Body.Read(chunk)
			got.Write(chunk[:n])
			if err != nil {
				break
			}
		}
		var n int
		_, _ = fmt.Sscan(want[1:], &n)
		mu.Lock()
		// An early answer's body may be cut: the transport closes a
		// connection whose write is not done 50 ms after the answer.
		// Every byte that came must be the client's.
		poison := bytes.Count(got.Bytes(), []byte{poisonByte})
		foreign := got.Len() - bytes.Count(got.Bytes(), []byte{want[0]})
		if poison > 0 || foreign > 0 || got.Len() > n || (r.Header.Get("X-Early") != "1" && got.Len() != n) {
			bad = append(bad, fmt.Sprintf("%s: got %d bytes, %d poisoned, %d foreign", want, got.Len(), poison, foreign))
		}
		if got.Len() == n {
			whole.Add(1)
		}
		mu.Unlock()
		if r.Header.Get("X-Early") != "1" {
			_, _ = w.Write([]byte("ok"))
		}
		done <- struct{}{}
	}))
	defer up.Close()
	target, _ := url.Parse(up.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	h, _ := testHandler(t, &fakeCompiler{}, nil)
	var compiles atomic.Int32
	h.Compile = func(ctx context.Context, req compiler.Request) compiler.Result {
		compiles.Add(1)
		return compiler.Result{Body: req.Body, Decision: compiler.Passthrough, Reason: compiler.ReasonNoSlots, RawBytes: len(req.Body), SentBytes: len(req.Body)}
	}
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", "Bearer sk-default")
		// Not canceled when the handler returns, so the transport goes on
		// writing the body after it (reverse_proxy's may, until it sees
		// the cancellation).
		ctx := context.WithoutCancel(r.Context())
		r = r.WithContext(context.WithValue(ctx, caddy.ReplacerCtxKey, caddyhttp.NewTestReplacer(r)))
		_ = h.ServeHTTP(w, r, Next(func(w http.ResponseWriter, r *http.Request) error {
			proxy.ServeHTTP(w, r)
			return nil
		}))
	}))
	defer gw.Close()

	const requests = 24
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			c := byte('a' + i%26)
			n := 70<<10 + i*7919
			early := i%3 == 0
			if early {
				n += 6 << 20 // more than loopback buffers: the transport still writes when the handler returns
			}
			req, _ := http.NewRequest(http.MethodPost, gw.URL+chatPath, bytes.NewReader(bytes.Repeat([]byte{c}, n)))
			req.Header.Set("X-Want", string(c)+fmt.Sprint(n))
			if early {
				req.Header.Set("X-Early", "1")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				mu.Lock()
				bad = append(bad, err.Error())
				mu.Unlock()
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		})
	}
	wg.Wait()
	for range requests {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("upstream did not read every body")
		}
	}
	if len(bad) > 0 {
		t.Fatalf("%d forwarded bodies differ from what was sent: %v", len(bad), bad[:min(5, len(bad))])
	}
	if whole.Load() < requests/2 {
		t.Fatalf("only %d of %d bodies came whole", whole.Load(), requests)
	}
	if compiles.Load() != requests {
		t.Fatalf("%d compiles for %d requests", compiles.Load(), requests)
	}
}

// The compile's scratch lives in the pooled memory: a pooled body has one,
// and after the memory went round the free list (reset, poisoned in tests)
// it serves the next compile as new; a body that is not pooled, grew past
// its class or was abandoned has none.
func TestBodyBufferScratch(t *testing.T) {
	c, err := compiler.New(compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	turns := fixtures.Turns(7, 12, 9000)
	prev, body := fixtures.ChatBody("gpt-4o", turns[:11], ""), fixtures.ChatBody("gpt-4o", turns, "")
	compileIn := func(b []byte, s *compiler.Scratch) compiler.Result {
		return c.Compile(context.Background(), compiler.Request{Path: "/v1/chat/completions", Body: b,
			Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce, Scratch: s})
	}
	compileIn(prev, nil)
	want := compileIn(body, nil)
	if want.Receipts == 0 {
		t.Fatalf("%s/%s: no receipts to compare", want.Decision, want.Reason)
	}
	for round := range 3 { // the memory (other tests' too) goes round the free list
		o, b := filledBuffer(t, len(body), 0)
		copy(b, body)
		s := o.scratch()
		if s == nil {
			t.Fatal("a pooled body has no scratch")
		}
		if got := compileIn(b, s); !bytes.Equal(got.Body, want.Body) || got.Receipts != want.Receipts {
			t.Fatalf("round %d: a compile in a used scratch differs (%s/%s, %d receipts)", round, got.Decision, got.Reason, got.Receipts)
		}
		var counted atomic.Int64
		o.holdScratch(&counted)
		if n := counted.Load(); n == 0 || n != int64(s.Bytes()) {
			t.Fatalf("the trees count %d bytes, their scratch holds %d", n, s.Bytes())
		}
		o.release()
		if n := counted.Load(); n != 0 {
			t.Fatalf("%d bytes of trees still counted after the body's release", n)
		}
		if s.Bytes() > cap(b)/2 {
			t.Fatalf("the free buffer keeps %d bytes of trees, more than half its %d", s.Bytes(), cap(b))
		}
	}
	if newBodyBuffer(0).scratch() != nil {
		t.Fatal("a body read without a declared length (not pooled) has a scratch")
	}
	o, b := filledBuffer(t, 100<<10, 'a')
	o.keep(append(b, make([]byte, cap(b))...))
	if o.scratch() != nil {
		t.Fatal("a body that grew past its class has a scratch")
	}
	o, _ = filledBuffer(t, 100<<10, 'a')
	o.abandon()
	if o.scratch() != nil {
		t.Fatal("an abandoned body has a scratch")
	}
}

// The token counter's work past its budget reads the pooled body under a
// reference of its own: the handler's release does not return the bytes
// while the workers read them, the last worker does, and no count the
// workers cached came from reused bytes.
func TestBodyHeldByTokenCounter(t *testing.T) {
	forcePoison(t)
	body := fixtures.ChatBody("gpt-4o", fixtures.Turns(77, 60, 20000), "")
	o := newBodyBuffer(int64(len(body) + 1))
	o.keep(append(o.b, body...))
	if o.mem == nil {
		t.Fatal("the body was not pooled")
	}
	c, err := tokens.New(tokens.Config{Budget: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	given := make(chan struct{}) // the counter's reference was dropped
	hold := func() (func(), bool) {
		release, ok := o.tryHold()
		return func() { release(); close(given) }, ok
	}
	if got := c.CountHeld(context.Background(), "gpt-4o", o.b, nil, hold); got.Status != tokens.StatusBudget {
		t.Fatalf("a cold %d-byte body counted within 1ms: %+v", len(body), got)
	}
	b := o.b
	o.release() // the handler's own reference
	if o.refs.Load() == 0 {
		t.Fatal("the counter's workers held no reference past the count")
	}
	select {
	case <-given:
	case <-time.After(time.Minute):
		t.Fatal("the counter never gave the body back")
	}
	if !poisoned(b) {
		t.Fatal("the last reference dropped, and the body was not released")
	}
	warm, err := c.WithBudget(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := tokens.New(tokens.Config{Budget: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got, want := warm.Count(context.Background(), "gpt-4o", body), fresh.Count(context.Background(), "gpt-4o", body)
	if got.Status != tokens.StatusExact || got.N != want.N {
		t.Fatalf("after the workers: %+v, a fresh count %+v", got, want)
	}
}
