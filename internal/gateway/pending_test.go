package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// flushNotifier is a client's connection: Flush hands the answer to the
// client, which calls onFlush (once).
type flushNotifier struct {
	*httptest.ResponseRecorder
	once    sync.Once
	onFlush func()
}

func (f *flushNotifier) Flush() {
	f.ResponseRecorder.Flush()
	f.once.Do(f.onFlush)
}

// A whole answer of declared length reaches the client before its lineage
// is recorded, and a client that sends its next request the moment it has
// the answer still compiles against the recorded lineage: the next compile
// of the tenant waits for the record. If the record were written before
// the flush, the first commit finds no flush; if the next compile did not
// wait, it would see no record.
func TestNextCompileWaitsForPromisedLineage(t *testing.T) {
	for _, tt := range []struct {
		name    string
		declare bool // the answer has a Content-Length; else its end is seen only when next returns
	}{{"declared length", true}, {"end unseen by the tap", false}} {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.declare {
				saved := newResponseReader
				newResponseReader = nil
				defer func() { newResponseReader = saved }()
			}
			nextCompileWaits(t, tt.declare)
		})
	}
}

func nextCompileWaits(t *testing.T, declare bool) {
	var (
		flushed, recorded atomic.Bool
		commitBeforeFlush atomic.Bool
		sawRecord         = make(chan bool, 1)
		nextCompiled      = make(chan struct{})
		nextWaiting       = make(chan struct{})
	)
	fc := &fakeCompiler{fn: func(_ context.Context, req compiler.Request) compiler.Result {
		res := compiler.Result{Body: []byte(`{}`), Decision: compiler.Accepted, RawBytes: len(req.Body), SentBytes: 2, Receipts: 1}
		if strings.Contains(string(req.Body), "second") {
			sawRecord <- recorded.Load()
			close(nextCompiled)
			return res
		}
		res.Commit = func() {
			if !flushed.Load() {
				commitBeforeFlush.Store(true) // the next request is never sent: do not wait for it
				recorded.Store(true)
				return
			}
			select { // until the next request waits for this record, or compiled without it
			case <-nextWaiting:
			case <-nextCompiled:
			}
			recorded.Store(true)
		}
		return res
	}}
	h, _ := testHandler(t, fc, nil)
	var once sync.Once
	h.pending = &pendingCommits{blocked: func(string) { once.Do(func() { close(nextWaiting) }) }}
	answer := func(w http.ResponseWriter, r *http.Request) error {
		_, _ = io.Copy(io.Discard, r.Body)
		if declare {
			w.Header().Set("Content-Length", "2")
		}
		_, err := io.WriteString(w, "{}")
		return err
	}
	var wg sync.WaitGroup
	second := &flushNotifier{ResponseRecorder: httptest.NewRecorder(), onFlush: func() {}}
	first := &flushNotifier{ResponseRecorder: httptest.NewRecorder(), onFlush: func() {
		flushed.Store(true)
		wg.Add(1)
		go func() { // the client's next request, sent as soon as it has the answer
			defer wg.Done()
			_ = h.ServeHTTP(second, newRequest(http.MethodPost, chatPath, strings.NewReader(`{"messages":[],"x":"second"}`)), answer)
		}()
	}}
	_ = h.ServeHTTP(first, newRequest(http.MethodPost, chatPath, strings.NewReader(`{"messages":[],"x":"first"}`)), answer)
	if commitBeforeFlush.Load() {
		t.Fatal("the lineage was recorded before the answer was flushed to the client")
	}
	if !flushed.Load() {
		t.Fatal("the whole answer was not flushed")
	}
	wg.Wait()
	if !<-sawRecord {
		t.Fatal("the next request of the tenant compiled before the lineage of the answered one was recorded")
	}
	if got := first.Body.String(); got != "{}" {
		t.Fatalf("client got %q", got)
	}
}

// A stream's lineage is recorded at its terminal event, before its last
// bytes reach the client, as its connection may stay open past it: no
// promise is left for the next compile to wait on.
func TestStreamCommitsAtTerminalEvent(t *testing.T) {
	var flushed, commitAfterFlush atomic.Bool
	fc := &fakeCompiler{fn: func(_ context.Context, req compiler.Request) compiler.Result {
		return compiler.Result{Body: []byte(`{}`), Decision: compiler.Accepted, RawBytes: len(req.Body), SentBytes: 2, Receipts: 1,
			Commit: func() { commitAfterFlush.Store(flushed.Load()) }}
	}}
	saved := newResponseReader
	newResponseReader = func(provider.Format, bool) responseReader { return &fakeReader{} }
	defer func() { newResponseReader = saved }()
	h, _ := testHandler(t, fc, func(g *Gateway) { g.pending = &pendingCommits{} })
	w := &flushNotifier{ResponseRecorder: httptest.NewRecorder(), onFlush: func() { flushed.Store(true) }}
	next := func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "text/event-stream")
		_, err := io.WriteString(w, "data: {}\n\ndata: [DONE]\n\n")
		return err
	}
	_ = h.ServeHTTP(w, newRequest(http.MethodPost, chatPath, strings.NewReader(`{"messages":[]}`)), next)
	if !flushed.Load() || commitAfterFlush.Load() {
		t.Fatalf("flushed %v, committed after the flush %v: want the record at the terminal event", flushed.Load(), commitAfterFlush.Load())
	}
	h.pending.mu.Lock()
	defer h.pending.mu.Unlock()
	if len(h.pending.m) != 0 {
		t.Fatalf("promises left open: %v", h.pending.m)
	}
}

// A closing vault waits for every lineage record promised in the process
// (AwaitLineage), within its bound.
func TestAwaitLineage(t *testing.T) {
	done := processPending.add("~await-test")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if AwaitLineage(ctx) {
		t.Fatal("returned with a promise open")
	}
	waited := make(chan bool)
	go func() { waited <- AwaitLineage(context.Background()) }()
	done()
	if !<-waited {
		t.Fatal("did not return once the promise was kept")
	}
}
