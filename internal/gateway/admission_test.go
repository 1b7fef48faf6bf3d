package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
	"github.com/tokenterminator/caddy-token-terminator/internal/tokens"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/badgervault"
)

// heapPeak samples the heap's object bytes (live and not yet swept) every
// millisecond until stop is called, and returns the peak above the level
// at the start.
func heapPeak() (stop func() (peak int64)) {
	runtime.GC()
	sample := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() int64 { rtmetrics.Read(sample); return int64(sample[0].Value.Uint64()) }
	base := read()
	var max int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			if v := read(); v > max {
				max = v
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 {
		close(done)
		wg.Wait()
		return max - base
	}
}

// largeBody is a chat history of about n bytes whose tool results repeat,
// so its compile does everything: receipts, vault writes, the check and
// the token gate.
func largeBody(seed, n int) []byte {
	turns := fixtures.Turns(seed*1000, n/60000, 40000)
	turns = append(turns, turns[:len(turns)/2]...)
	return fixtures.ChatBody("gpt-4o", turns, "go on")
}

// realGateway is a gateway with the handler's defaults over a real vault,
// token counter and compiler (what caddymodule wires), every tenant
// verified.
func realGateway(t testing.TB, mutate func(*Gateway)) *Gateway {
	t.Helper()
	h, _ := realGatewayStore(t, mutate)
	return h
}

// realGatewayStore is realGateway and its vault.
func realGatewayStore(t testing.TB, mutate func(*Gateway)) (*Gateway, *badgervault.Store) {
	t.Helper()
	h, _ := testHandler(t, &fakeCompiler{}, mutate)
	h.Logger = zap.NewNop()
	store, err := badgervault.Open(badgervault.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	counter, err := tokens.New(tokens.Config{Tokenizer: "auto", Budget: 250 * time.Millisecond, CacheBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	comp, err := compiler.New(compiler.Options{
		Timeout:    h.CompileTimeout,
		Compaction: compiler.Compaction{Enabled: true, MinVaultChars: 4000, CollapseAfterTurns: 6, InlineRecentTurns: 5},
		Recovery:   CompilerRecovery(RecoveryTool, recovery.Config{}.WithDefaults()),
	}, store, counter)
	if err != nil {
		t.Fatal(err)
	}
	h.Compile, h.Observe = comp.Compile, comp.ObserveUsage
	h.Tenants = TenantHasher([]byte("0123456789abcdef0123456789abcdef"))
	h.FormatFor = compiler.FormatFor
	return h, store
}

func serveBody(h *Gateway, body []byte) (string, error) {
	r := httptest.NewRequest(http.MethodPost, chatPath, bytes.NewReader(body))
	r.Header.Set("Authorization", "Bearer sk-memory")
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	err := h.ServeHTTP(w, r, Next(func(w http.ResponseWriter, r *http.Request) error {
		_, err := io.Copy(io.Discard, r.Body)
		return err
	}))
	return w.Header().Get(HeaderName), err
}

// The compile's working memory is admitted against max_buffered_bytes
// (issue 12, item 8). First the factor: one compile of a large body, with
// the collector kept close to the live heap, must peak within
// (1 + compileWorkFactor) × its body. Then the bound: 16 concurrent 9 MB
// compiles through a really provisioned handler (vault, compiler, token
// counter) with max_buffered_bytes 96 MiB grow the heap by at most 3× the
// bound (live ≤ the bound, and the collector's headroom at GOGC=100 at most
// doubles it); unadmitted, they would hold about 16 × 5 × 9 MB = 720 MB.
func TestCompileMemoryAdmitted(t *testing.T) {
	if testing.Short() {
		t.Skip("large bodies")
	}
	const maxBuf = 96 << 20
	h := realGateway(t, func(g *Gateway) { g.MaxBufferedBytes, g.CompileTimeout = maxBuf, 30*time.Second })

	one := largeBody(999, 8<<20)
	old := debug.SetGCPercent(5)
	stop := heapPeak()
	tt, err := serveBody(h, one)
	peak := stop()
	debug.SetGCPercent(old)
	if err != nil || !strings.HasPrefix(tt, "accepted") {
		t.Fatalf("single compile: %q %v", tt, err)
	}
	factor := float64(peak) / float64(len(one))
	t.Logf("one compile of %d bytes: heap peak +%d bytes = %.2f× the body", len(one), peak, factor)
	if factor > 1+compileWorkFactor {
		t.Fatalf("a compile peaks at %.2f× its body; compileWorkFactor %d (+1 for the body) does not cover it", factor, compileWorkFactor)
	}

	const n = 16
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = largeBody(i, 8<<20)
	}
	stop = heapPeak()
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{}
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tt, err := serveBody(h, bodies[i])
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				outcomes["error "+err.Error()]++
				return
			}
			outcomes[strings.SplitN(tt, ";", 2)[0]]++
		}()
	}
	wg.Wait()
	peak = stop()
	t.Logf("%d concurrent compiles of %d bytes, max_buffered_bytes %d: heap peak +%d bytes (%.2f× the bound); %v", n, len(bodies[0]), maxBuf, peak, float64(peak)/maxBuf, outcomes)
	if peak > 3*maxBuf {
		t.Fatalf("heap grew by %d bytes, more than 3× max_buffered_bytes (%d)", peak, maxBuf)
	}
	// The budget admits this many at once with their working memory; each
	// admitted one is compiled (a waiting one holds its reservation).
	fit := maxBuf / (len(bodies[0]) * (1 + compileWorkFactor))
	if outcomes["accepted"] < fit || outcomes["passthrough=busy"] == 0 || outcomes["accepted"]+outcomes["passthrough=busy"] != n {
		t.Fatalf("outcomes %v: want at least %d compiled (what the budget admits at once), the rest busy", outcomes, fit)
	}
	if held := h.Buffered.Load(); held != 0 {
		t.Fatalf("%d bytes still counted as held", held)
	}
}

// At most max_concurrent_compiles compiles run at once; the others wait
// for a slot, and every one of them is compiled when the slots free up in
// time.
func TestMaxConcurrentCompilesBoundsCompiles(t *testing.T) {
	var running, peak, calls atomic.Int32
	// Its own compile func: fakeCompiler records its last request unlocked.
	compile := func(_ context.Context, req compiler.Request) compiler.Result {
		calls.Add(1)
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(20 * time.Millisecond)
		running.Add(-1)
		return compiler.Result{Body: []byte(`{"compiled":1}`), Decision: compiler.Accepted, RawBytes: len(req.Body), SentBytes: 14}
	}
	h, _ := testHandler(t, &fakeCompiler{}, func(h *Gateway) {
		h.MaxConcurrentCompiles = 2
		h.CompileTimeout = time.Minute
	})
	h.Compile = compile
	const requests = 7
	var wg sync.WaitGroup
	headers := make([]string, requests)
	for i := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := httptest.NewRecorder()
			if err := h.ServeHTTP(w, newRequest(http.MethodPost, chatPath, strings.NewReader(`{"messages":[]}`)), recordNext(&seen{})); err != nil {
				t.Error(err)
			}
			headers[i] = w.Header().Get(HeaderName)
		}()
	}
	wg.Wait()
	for i, tt := range headers {
		if !strings.HasPrefix(tt, "accepted;") {
			t.Errorf("request %d: %q, want accepted", i, tt)
		}
	}
	if got := peak.Load(); got != 2 {
		t.Fatalf("%d compiles ran at once, want 2 (max_concurrent_compiles)", got)
	}
	if got := calls.Load(); got != requests {
		t.Fatalf("%d compiles, want %d", got, requests)
	}
}

// A candidate that gets no slot within compile_timeout goes upstream
// unchanged (passthrough=busy) and is never compiled; a compile abandoned
// at compile_timeout holds its slot until it stops, not until the handler
// moves on.
func TestMaxConcurrentCompilesWaitIsBounded(t *testing.T) {
	entered := make(chan struct{}, 1)
	unblock := make(chan struct{})
	var abandoned func() // the Done of a compile that outlived its timeout
	var mu sync.Mutex
	fc := &fakeCompiler{fn: func(ctx context.Context, req compiler.Request) compiler.Result {
		if strings.Contains(string(req.Body), "block") {
			entered <- struct{}{}
			<-unblock
		}
		if strings.Contains(string(req.Body), "abandon") {
			<-ctx.Done()
			mu.Lock()
			abandoned = req.Done // still working: it says Done later
			mu.Unlock()
			return compiler.Result{Body: req.Body, Decision: compiler.Passthrough, Reason: compiler.ReasonTimeout, RawBytes: len(req.Body), SentBytes: len(req.Body)}
		}
		return compiler.Result{Body: []byte(`{}`), Decision: compiler.Accepted, RawBytes: len(req.Body), SentBytes: 2}
	}}
	h, logs := testHandler(t, fc, func(h *Gateway) {
		h.MaxConcurrentCompiles = 1
		h.CompileTimeout = 100 * time.Millisecond
	})
	serve := func(body string) (header string, forwarded []byte) {
		var s seen
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, newRequest(http.MethodPost, chatPath, strings.NewReader(body)), recordNext(&s)); err != nil {
			t.Fatal(err)
		}
		return w.Header().Get(HeaderName), s.body
	}

	done := make(chan string, 1)
	go func() { tt, _ := serve(`{"messages":["block"]}`); done <- tt }()
	<-entered // the only slot is taken
	const waiting = `{"messages":["waits for a slot"]}`
	tt, fwd := serve(waiting)
	if !strings.HasPrefix(tt, "passthrough=busy;") || string(fwd) != waiting {
		t.Fatalf("while the slot is taken: %q, forwarded %q", tt, fwd)
	}
	if got := fc.calls.Load(); got != 1 {
		t.Fatalf("%d compiles, want 1: the waiting request must not be compiled", got)
	}
	var queued float64
	for _, e := range logs.All() {
		if v, ok := e.ContextMap()["queue_ms"].(float64); ok {
			queued = v
		}
	}
	if queued < 100 {
		t.Fatalf("queue_ms %v, want the compile_timeout it waited (100 ms)", queued)
	}
	close(unblock)
	if tt := <-done; !strings.HasPrefix(tt, "accepted;") {
		t.Fatalf("the blocking compile: %q", tt)
	}
	if tt, _ := serve(`{"messages":[]}`); !strings.HasPrefix(tt, "accepted;") {
		t.Fatalf("after the slot came back: %q", tt)
	}

	if tt, _ := serve(`{"messages":["abandon"]}`); !strings.HasPrefix(tt, "passthrough=timeout;") {
		t.Fatalf("abandoned compile: %q", tt)
	}
	if tt, _ := serve(`{"messages":[]}`); !strings.HasPrefix(tt, "passthrough=busy;") {
		t.Fatalf("while the abandoned compile still runs: %q, want busy", tt)
	}
	mu.Lock()
	abandoned()
	mu.Unlock()
	if tt, _ := serve(`{"messages":[]}`); !strings.HasPrefix(tt, "accepted;") {
		t.Fatalf("after the abandoned compile stopped: %q", tt)
	}
}

// A candidate that waits for a compile slot already holds the reservation
// of its compile's working memory, so the budget can never fill with
// waiting bodies that leave no room for the compile whose turn it is (in
// CI, 16 concurrent 9 MB candidates under 96 MiB all went upstream
// uncompiled that way). Those the budget cannot compile are told so at
// the door, without waiting for a slot; every one admitted is compiled.
func TestWaitingCandidatesHoldTheirWorkingMemory(t *testing.T) {
	body := `{"messages":[` + strings.Repeat(" ", 985) + `]}` // 1000 bytes
	door := int64(len(body)) * (1 + compileWorkFactor)
	unblock := make(chan struct{})
	free := sync.OnceFunc(func() { close(unblock) })
	t.Cleanup(free) // a failure must not leave the first compile blocked
	var calls atomic.Int32
	compile := func(_ context.Context, req compiler.Request) compiler.Result {
		if calls.Add(1) == 1 {
			<-unblock
		}
		return compiler.Result{Body: []byte(`{"compiled":1}`), Decision: compiler.Accepted, RawBytes: len(req.Body), SentBytes: 14}
	}
	h, _ := testHandler(t, &fakeCompiler{}, func(h *Gateway) {
		h.MaxConcurrentCompiles = 1
		h.MaxBufferedBytes = 3 * (door + 1) // the compiling one and two waiting (a body's buffer has a byte more, to see EOF)
		h.CompileTimeout = time.Minute
	})
	h.Compile = compile
	run := func(out chan<- string) {
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, newRequest(http.MethodPost, chatPath, strings.NewReader(body)), recordNext(&seen{})); err != nil {
			t.Error(err)
		}
		out <- strings.SplitN(w.Header().Get(HeaderName), ";", 2)[0]
	}
	first := make(chan string, 1)
	go run(first)
	for calls.Load() == 0 { // the first holds the only slot
		time.Sleep(time.Millisecond)
	}
	const waiting = 8
	rest := make(chan string, waiting)
	for range waiting {
		go run(rest)
	}
	// Six are refused at once, while the slot is still taken.
	for i := range waiting - 2 {
		select {
		case got := <-rest:
			if got != "passthrough=busy" {
				t.Fatalf("refused candidate %d: %q, want passthrough=busy", i, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d candidates came back while the slot was taken, want %d: the others wait without room to compile", i, waiting, waiting-2)
		}
	}
	free()
	if got := <-first; got != "accepted" {
		t.Fatalf("first candidate: %q", got)
	}
	for range 2 {
		if got := <-rest; got != "accepted" {
			t.Fatalf("a candidate that waited for the slot: %q, want accepted", got)
		}
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d compiles, want 3", n)
	}
	if held := h.Buffered.Load(); held != 0 {
		t.Fatalf("%d bytes still counted as held", held)
	}
}

// watchedBody notes the handler's reserved bytes when its body is first
// read, that is, after the reservation at the door.
type watchedBody struct {
	*strings.Reader
	h    *Gateway
	seen int64
}

func (b *watchedBody) Read(p []byte) (int, error) {
	if b.seen == 0 {
		b.seen = b.h.Buffered.Load()
	}
	return b.Reader.Read(p)
}

// What a candidate reserves: while its body arrives, the buffer it was
// read into (a declared length is not reserved up front); once the body is
// whole, when it will be compiled, its compile's working memory too, held
// while it compiles; only the body when the headers already say it will
// only be forwarded (no tenant).
func TestReservationWhileTheBodyIsRead(t *testing.T) {
	body := `{"messages":[` + strings.Repeat(" ", 985) + `]}` // 1000 bytes
	for _, tc := range []struct {
		name       string
		credential bool
		want       int64 // reserved while the body is read
		compiling  int64 // reserved while it is compiled; 0: not compiled
		header     string
	}{
		{"compiled", true, int64(len(body)) + 1, int64(len(body)) + 1 + int64(len(body))*compileWorkFactor, "passthrough=no_slots"},
		{"no tenant", false, int64(len(body)) + 1, 0, "passthrough=no_tenant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := &fakeCompiler{}
			// Without body_read_timeout the body is read on the request's
			// goroutine, so what is reserved when a Read starts is
			// deterministic; with it, the pump reads its small look-ahead
			// from another goroutine, before or after the reservation.
			h, _ := testHandler(t, fc, func(h *Gateway) { h.BodyReadTimeout = 0 })
			var compiling int64
			inner := h.Compile
			h.Compile = func(ctx context.Context, req compiler.Request) compiler.Result {
				compiling = h.Buffered.Load()
				return inner(ctx, req)
			}
			wb := &watchedBody{Reader: strings.NewReader(body), h: h}
			r := newRequest(http.MethodPost, chatPath, wb)
			r.ContentLength = int64(len(body))
			if !tc.credential {
				r.Header.Del("Authorization")
			}
			w, s := serve(t, h, r)
			if got := strings.SplitN(w.Header().Get(HeaderName), ";", 2)[0]; got != tc.header || string(s.body) != body {
				t.Fatalf("header %q, upstream got %d bytes", got, len(s.body))
			}
			if wb.seen != tc.want {
				t.Fatalf("%d bytes reserved while the body was read, want %d", wb.seen, tc.want)
			}
			if compiling != tc.compiling {
				t.Fatalf("%d bytes reserved while the body was compiled, want %d", compiling, tc.compiling)
			}
			if n := h.Buffered.Load(); n != 0 {
				t.Fatalf("%d bytes still reserved", n)
			}
		})
	}
}
