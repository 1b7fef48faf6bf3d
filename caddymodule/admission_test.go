package caddymodule

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/compiler/compilertest"
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
	turns := compilertest.Turns(seed*1000, n/60000, 40000)
	turns = append(turns, turns[:len(turns)/2]...)
	return compilertest.ChatBody("gpt-4o", turns, "go on")
}

func serveBody(h *Handler, body []byte) (string, error) {
	r := httptest.NewRequest(http.MethodPost, chatPath, bytes.NewReader(body))
	r.Header.Set("Authorization", "Bearer sk-memory")
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	err := h.ServeHTTP(w, r, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		_, err := io.Copy(io.Discard, r.Body)
		return err
	}))
	return w.Header().Get(HeaderName), err
}

// The compile's working memory is admitted against max_buffered_bytes
// (issue 12, item 8). First the factor: one compile of a large body, with
// the collector kept close to the live heap, must peak within
// (1 + compileWorkFactor) × its body. Then the bound: 16 concurrent 8 MB
// compiles through a really provisioned handler (vault, compiler, token
// counter) with max_buffered_bytes 96 MiB grow the heap by at most 3× the
// bound (live ≤ the bound, and the collector's headroom at GOGC=100 at most
// doubles it); unadmitted, they would hold about 16 × 5 × 8 MB = 640 MB.
func TestCompileMemoryAdmitted(t *testing.T) {
	if testing.Short() {
		t.Skip("large bodies")
	}
	app, ctx := newApp(t)
	const maxBuf = 96 << 20
	h := &Handler{VaultDir: t.TempDir(), MaxBufferedBytes: int64p(maxBuf), CompileTimeout: caddy.Duration(30 * time.Second)}
	if err := provisionHandler(t, app, ctx, h); err != nil {
		t.Fatal(err)
	}
	h.logger = zap.NewNop()

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
	if outcomes["accepted"] == 0 || outcomes["passthrough=busy"] == 0 || outcomes["accepted"]+outcomes["passthrough=busy"] != n {
		t.Fatalf("outcomes %v: want some compiled, the rest busy", outcomes)
	}
	if held := h.buffered.Load(); held != 0 {
		t.Fatalf("%d bytes still counted as held", held)
	}
}
