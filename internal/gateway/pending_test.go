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
	"time"

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

// A whole answer of declared length reaches the client while its lineage
// record is still being written, and a client that sends its next request
// the moment it has the answer still compiles against the record: the
// next compile of the tenant waits for it. The record's write holds until
// the client has the answer and the next compile waits: if the answer
// waited for the record, or the next compile did not wait, the first
// request would never end or the record would be missed.
func TestNextCompileWaitsForPromisedLineage(t *testing.T) {
	for _, tt := range []struct {
		name    string
		declare bool // the answer has a Content-Length; else its end is seen only when next returns
		reload  bool // the next request reaches the gateway of a reloaded config
	}{
		{"declared length", true, false},
		{"end unseen by the tap", false, false},
		{"the next request reaches a reloaded gateway", true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.declare {
				saved := newResponseReader
				newResponseReader = nil
				defer func() { newResponseReader = saved }()
			}
			nextCompileWaits(t, tt.declare, tt.reload)
		})
	}
}

// deadlockGuard bounds a wait that only a broken ordering leaves
// unanswered; it is no speed check.
const deadlockGuard = 30 * time.Second

func nextCompileWaits(t *testing.T, declare, reload bool) {
	var (
		recorded     atomic.Bool
		flushed      = make(chan struct{})
		sawRecord    = make(chan bool, 1)
		nextCompiled = make(chan struct{})
		nextWaiting  = make(chan struct{})
		stuck        atomic.Bool
	)
	fc := &fakeCompiler{fn: func(_ context.Context, req compiler.Request) compiler.Result {
		res := compiler.Result{Body: []byte(`{}`), Decision: compiler.Accepted, RawBytes: len(req.Body), SentBytes: 2, Receipts: 1}
		if strings.Contains(string(req.Body), "second") {
			sawRecord <- recorded.Load()
			close(nextCompiled)
			return res
		}
		res.Commit = func() {
			select { // the client has the answer while its record is written
			case <-flushed:
			case <-time.After(deadlockGuard):
				stuck.Store(true)
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
	blocked := func(string) { once.Do(func() { close(nextWaiting) }) }
	next := h // the gateway the next request reaches
	if reload {
		// Both gateways use the process's registry (pending nil), as an
		// old config's and its reload's do.
		next, _ = testHandler(t, fc, nil)
		processPending.mu.Lock()
		processPending.blocked = blocked
		processPending.mu.Unlock()
		defer func() {
			processPending.mu.Lock()
			processPending.blocked = nil
			processPending.mu.Unlock()
		}()
	} else {
		h.pending = &pendingCommits{blocked: blocked}
	}
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
		close(flushed)
		wg.Add(1)
		go func() { // the client's next request, sent as soon as it has the answer
			defer wg.Done()
			_ = next.ServeHTTP(second, newRequest(http.MethodPost, chatPath, strings.NewReader(`{"messages":[],"x":"second"}`)), answer)
		}()
	}}
	_ = h.ServeHTTP(first, newRequest(http.MethodPost, chatPath, strings.NewReader(`{"messages":[],"x":"first"}`)), answer)
	if stuck.Load() {
		t.Fatal("the answer was not flushed while its lineage record was being written")
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

// Every promise of a lineage record ends in bounded time, kept or broken:
// a write that panics, an answer aborted after it was whole, a write that
// returns (recorded, or failed in the vault) and a write stuck past the
// promise's bound. The tenant's next compile then goes on, and no promise
// is left open.
func TestPromiseKeptOrBroken(t *testing.T) {
	for _, tt := range []struct {
		name      string
		commit    func(release <-chan struct{})
		abort     bool // next panics after the whole answer (reverse_proxy's abort)
		stuck     bool // the write outlasts the bound: the next compile runs while it still hangs
		wantLog   string
		committed bool
	}{
		{name: "written", commit: func(<-chan struct{}) {}, committed: true},
		{name: "the write panics", commit: func(<-chan struct{}) { panic("vault") }, wantLog: "recording a request's lineage panicked; the next request of the conversation inlines more"},
		{name: "the answer aborts after it was whole", commit: func(<-chan struct{}) {}, abort: true, committed: true},
		{name: "the write outlasts the bound", commit: func(release <-chan struct{}) { <-release }, stuck: true, committed: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			promiseEnds(t, tt.commit, tt.abort, tt.stuck, tt.wantLog, tt.committed)
		})
	}
}

func promiseEnds(t *testing.T, write func(<-chan struct{}), abort, stuck bool, wantLog string, committed bool) {
	release := make(chan struct{})
	var (
		writes        atomic.Int32
		firstReturned atomic.Bool
		blocked       atomic.Bool
		ranWhileStuck = make(chan bool, 1)
	)
	fc := &fakeCompiler{fn: func(_ context.Context, req compiler.Request) compiler.Result {
		res := compiler.Result{Body: []byte(`{}`), Decision: compiler.Accepted, RawBytes: len(req.Body), SentBytes: 2, Receipts: 1}
		if strings.Contains(string(req.Body), "second") {
			ranWhileStuck <- !firstReturned.Load()
			return res
		}
		res.Commit = func() { writes.Add(1); write(release) }
		return res
	}}
	h, logs := testHandler(t, fc, nil)
	h.pending = &pendingCommits{blocked: func(string) { blocked.Store(true) }}
	if stuck {
		h.pending.bound = 20 * time.Millisecond
	}
	answer := func(w http.ResponseWriter, r *http.Request) error {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Length", "2")
		_, err := io.WriteString(w, "{}")
		if abort && strings.Contains(r.Header.Get("X-Test"), "first") {
			panic(http.ErrAbortHandler)
		}
		return err
	}
	req := func(name string) *http.Request {
		r := newRequest(http.MethodPost, chatPath, strings.NewReader(`{"messages":[],"x":"`+name+`"}`))
		r.Header.Set("X-Test", name)
		return r
	}
	firstDone := make(chan any, 1)
	go func() {
		defer func() { firstReturned.Store(true); firstDone <- recover() }()
		_ = h.ServeHTTP(httptest.NewRecorder(), req("first"), answer)
	}()
	if !stuck {
		if v := <-firstDone; (v != nil) != abort {
			t.Fatalf("the first request ended with panic %v (abort %v)", v, abort)
		}
	}
	if !stuck && open(h.pending) != 0 {
		t.Fatal("a promise is left open after its request ended")
	}
	for stuck && open(h.pending) == 0 { // the write has begun and holds its promise
		time.Sleep(time.Millisecond)
	}
	_ = h.ServeHTTP(httptest.NewRecorder(), req("second"), answer)
	var got bool
	select {
	case got = <-ranWhileStuck:
	case <-time.After(deadlockGuard):
		t.Fatal("the next request was never compiled")
	}
	if got != stuck {
		t.Fatalf("the next compile ran while the first request was still writing: %v, want %v", got, stuck)
	}
	if stuck && !blocked.Load() {
		t.Fatal("the next compile did not wait for the promise before it was broken")
	}
	close(release)
	if stuck {
		<-firstDone
	}
	if n := writes.Load(); n != 1 {
		t.Fatalf("the lineage was written %d times, want once", n)
	}
	if n := open(h.pending); n != 0 {
		t.Fatalf("%d promises left open", n)
	}
	if wantLog != "" && logs.FilterMessage(wantLog).Len() != 1 {
		t.Fatalf("no log line %q", wantLog)
	}
	var first map[string]any
	for _, e := range logs.FilterMessage("request").All() {
		if m := e.ContextMap(); m["raw_bytes"] == int64(len(`{"messages":[],"x":"first"}`)) {
			first = m
		}
	}
	if first == nil || first["committed"] != committed {
		t.Fatalf("the first request's log line says committed=%v, want %v", first["committed"], committed)
	}
}

// open counts the open promises of p.
func open(p *pendingCommits) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, prs := range p.m {
		n += len(prs)
	}
	return n
}

// A message on the WebSocket is compiled only after the lineage records
// its tenant was promised over HTTP: the socket's compile waits for them
// as an HTTP compile does.
func TestWebSocketCompileWaitsForPromisedLineage(t *testing.T) {
	var recorded, compiledFirst atomic.Bool
	var done func()
	pending := &pendingCommits{}
	pending.blocked = func(string) {
		go func() { recorded.Store(true); done() }() // the write ends while the compile waits
	}
	w := newWSTest(t, func(g *Gateway) { g.pending = pending })
	compile := w.h.Compile
	w.h.Compile = func(ctx context.Context, req compiler.Request) compiler.Result {
		compiledFirst.Store(!recorded.Load())
		return compile(ctx, req)
	}
	done = pending.add(wsTenant)
	msg := wsMessageBody("a", "")
	if got := w.relay(t, msg); len(got) != 1 || got[0] != strings.Replace(msg, "long", "r", 1) {
		t.Fatalf("forwarded %q", got)
	}
	if compiledFirst.Load() {
		t.Fatal("the socket's message was compiled before the tenant's promised lineage record was written")
	}
	if !recorded.Load() {
		t.Fatal("the socket's compile did not wait for the tenant's promise")
	}
}
