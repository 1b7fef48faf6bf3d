package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/memvault"
)

// The warm-up compiles its generated conversation to receipts with the
// compiler it is given, over that compiler's own store, and never calls the
// gateway's compiler: no tenant state is written. Its buffer share and
// compile slot are returned.
func TestWarmUpCompilesWithoutTheGatewaysState(t *testing.T) {
	gwc := &fakeCompiler{fn: func(context.Context, compiler.Request) compiler.Result {
		t.Error("the warm-up called the gateway's compiler")
		return compiler.Result{}
	}}
	h, logs := testHandler(t, gwc, nil)
	store := memvault.New()
	comp, err := compiler.New(compiler.Options{InlineLeases: 1}, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	var modes []compiler.Mode
	var tenants []string
	spy := func(ctx context.Context, req compiler.Request) compiler.Result {
		modes, tenants = append(modes, req.Mode), append(tenants, req.Scope.Tenant)
		return comp.Compile(ctx, req)
	}
	if !h.WarmUp(context.Background(), spy) {
		t.Fatalf("warm-up did not compile to receipts: %v", logs.All())
	}
	if len(modes) != 2 || tenants[0] != warmUpTenant || tenants[1] != warmUpTenant {
		t.Fatalf("compiles %v for tenants %q", modes, tenants)
	}
	if store.Persisted == 0 {
		t.Fatal("the warm-up's receipts were not persisted in its own store")
	}
	if gwc.calls.Load() != 0 {
		t.Fatal("the gateway's compiler was called")
	}
	if n := h.Buffered.Load(); n != 0 {
		t.Fatalf("%d bytes still counted in max_buffered_bytes", n)
	}
	if len(h.Slots) != 0 {
		t.Fatalf("%d compile slots still held", len(h.Slots))
	}
	e := logs.FilterMessage("warm-up compile done").All()
	if len(e) != 1 || e[0].ContextMap()["compiled"] != true {
		t.Fatalf("log: %v", logs.All())
	}
}

// A warm-up that cannot run, panics or hangs never stops the gateway from
// serving: WarmUp reports it, and a request meanwhile is answered.
func TestWarmUpNeverStopsServing(t *testing.T) {
	release := make(chan struct{})
	tests := []struct {
		name    string
		compile CompileFunc
		mutate  func(*Gateway)
		hangs   bool
	}{
		{"nil compiler", nil, nil, false},
		{"vault error", okCompile, func(g *Gateway) { g.VaultErr = "vault did not open" }, false},
		{"mode off", okCompile, func(g *Gateway) { g.Mode = compiler.ModeOff }, false},
		{"body larger than max_body_size", okCompile, func(g *Gateway) { g.MaxBodySize = 1 << 10 }, false},
		{"no room in max_buffered_bytes", okCompile, func(g *Gateway) { g.MaxBufferedBytes = 1 << 10 }, false},
		{"panics", func(context.Context, compiler.Request) compiler.Result { panic("warm-up") }, nil, false},
		{"hangs", func(ctx context.Context, req compiler.Request) compiler.Result {
			<-release // ignores its context, as a stuck compiler would
			return compiler.Result{Body: req.Body, Decision: compiler.Passthrough, Reason: compiler.ReasonTimeout}
		}, func(g *Gateway) { g.Slots = NewCompileSlots(1) }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := testHandler(t, &fakeCompiler{}, tt.mutate)
			done := make(chan bool, 1)
			go func() { done <- h.WarmUp(context.Background(), tt.compile) }()
			if !tt.hangs {
				if <-done {
					t.Fatal("warm-up reported compiled")
				}
			}
			w := httptest.NewRecorder()
			err := h.ServeHTTP(w, newRequest(http.MethodPost, chatPath, strings.NewReader(`{"messages":[]}`)), recordNext(&seen{}))
			if err != nil || w.Code != http.StatusOK {
				t.Fatalf("request during the warm-up: %v, status %d", err, w.Code)
			}
			if tt.hangs {
				close(release)
				if <-done {
					t.Fatal("a warm-up that hung reported compiled")
				}
			}
		})
	}
}

func okCompile(_ context.Context, req compiler.Request) compiler.Result {
	return compiler.Result{Body: req.Body, Decision: compiler.Accepted, Receipts: 1}
}

// A warm-up that starts after a client compile of a large body has begun
// compiles nothing: the request warms the process itself. Small requests
// and pass-throughs leave it running.
func TestWarmUpStopsOnceServed(t *testing.T) {
	large := `{"messages":[{"role":"user","content":"` + strings.Repeat("x", warmUpYieldBytes) + `"}]}`
	tests := []struct {
		name    string
		body    string
		noCreds bool // passes through (no_tenant) without a compile
		stops   bool
	}{
		{"small compiled request", `{"messages":[]}`, false, false},
		{"large request passed through", large, true, false},
		{"large compiled request", large, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := &fakeCompiler{}
			h, _ := testHandler(t, fc, nil)
			r := newRequest(http.MethodPost, chatPath, strings.NewReader(tt.body))
			if tt.noCreds {
				r.Header.Del("Authorization")
			}
			if err := h.ServeHTTP(httptest.NewRecorder(), r, recordNext(&seen{})); err != nil {
				t.Fatal(err)
			}
			if compiled := fc.calls.Load() > 0; compiled == tt.noCreds {
				t.Fatalf("client request compiled: %v", compiled)
			}
			var calls int
			spy := func(_ context.Context, req compiler.Request) compiler.Result {
				calls++
				return okCompile(context.Background(), req)
			}
			ran := h.WarmUp(context.Background(), spy)
			if stopped := !ran && calls == 0; stopped != tt.stops {
				t.Fatalf("warm-up after the request: ran %v, %d compiles; want stopped %v", ran, calls, tt.stops)
			}
		})
	}
}
