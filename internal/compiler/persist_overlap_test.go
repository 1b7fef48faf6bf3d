package compiler_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// overlapStore runs before (if set) at the start of every Persist; an
// error (or a panic) from it is Persist's. It records whether a Persist
// saw its context cancelled.
type overlapStore struct {
	*compilertest.MemStore
	before    func(ctx context.Context) error
	cancelled atomic.Bool
}

func (s *overlapStore) Persist(ctx context.Context, scope artifact.Scope, arts []artifact.Artifact) error {
	if s.before != nil {
		if err := s.before(ctx); err != nil {
			s.cancelled.Store(ctx.Err() != nil)
			return err
		}
	}
	return s.MemStore.Persist(ctx, scope, arts)
}

// overlapTokens counts a body's bytes as its tokens (a rewrite's times
// 1000 with more), after wait (if set); a count whose context ends first
// reports the budget status, as the real counter does. counted is closed
// once both bodies of one gate are counted.
type overlapTokens struct {
	more    bool
	panics  bool // the count of the original panics
	wait    func(ctx context.Context)
	n       atomic.Int32
	once    sync.Once
	counted chan struct{}
}

func (o *overlapTokens) Count(ctx context.Context, _ string, body []byte) artifact.TokenCount {
	if o.wait != nil {
		o.wait(ctx)
	}
	if o.panics && !bytes.Contains(body, []byte(artifact.ReceiptPrefix)) {
		panic("count failed")
	}
	defer func() {
		if o.n.Add(1) == 2 {
			o.once.Do(func() { close(o.counted) })
		}
	}()
	if ctx.Err() != nil {
		return artifact.TokenCount{Status: artifact.TokensBudget}
	}
	n := len(body)
	if o.more && bytes.Contains(body, []byte(artifact.ReceiptPrefix)) {
		n *= 1000
	}
	return artifact.TokenCount{N: n, Encoding: "fake", Exact: true, Status: artifact.TokensExact}
}

// TestGateAndPersistOverlap: the final gate and the write of the
// artifacts run at once, and whatever their order the rewrite goes out
// only once its artifacts are stored and readable; a refused rewrite or
// a failed write forwards the original; a write the gate no longer needs,
// and a count the write no longer needs, are stopped; at the timeout both
// stop before the compile reports it has.
func TestGateAndPersistOverlap(t *testing.T) {
	o := fixtures.ToolOutput(61, 9000)
	body := fixtures.ChatBody("gpt-4o", []fixtures.ChatTurn{{Tool: "bash", Output: o}, {Tool: "bash", Output: o}}, "")
	errDisk := errors.New("disk on fire")
	tests := []struct {
		name    string
		mode    compiler.Mode
		timeout time.Duration // a minute unless set: a compile that waits for the wrong thing ends as a timeout
		more    bool
		panics  bool
		wait    func(tc *overlapTokens) func(ctx context.Context)
		before  func(tc *overlapTokens) func(ctx context.Context) error
		want    compiler.Reason
		stored  int  // artifacts readable when Compile returns (-1: not checked)
		cancels bool // the write saw its context cancelled
	}{
		{name: "the write ends after the gate passed", want: "", stored: 1,
			before: func(tc *overlapTokens) func(context.Context) error {
				return func(context.Context) error { <-tc.counted; return nil }
			}},
		{name: "the write fails after the gate passed", want: compiler.ReasonVaultError, stored: 0,
			before: func(tc *overlapTokens) func(context.Context) error {
				return func(context.Context) error { <-tc.counted; return errDisk }
			}},
		{name: "the gate refuses while the write waits", more: true, want: compiler.ReasonMoreTokens, stored: 0, cancels: true,
			before: func(*overlapTokens) func(context.Context) error {
				return func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
			}},
		{name: "the write fails while the gate counts", want: compiler.ReasonVaultError, stored: 0,
			wait: func(*overlapTokens) func(context.Context) { return func(ctx context.Context) { <-ctx.Done() } },
			before: func(*overlapTokens) func(context.Context) error {
				return func(context.Context) error { return errDisk }
			}},
		{name: "the write panics", want: compiler.ReasonPanic, stored: 0,
			before: func(*overlapTokens) func(context.Context) error {
				return func(context.Context) error { panic("boom") }
			}},
		{name: "the gate panics while the write waits", panics: true, want: compiler.ReasonPanic, stored: 0, cancels: true,
			before: func(*overlapTokens) func(context.Context) error {
				return func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
			}},
		{name: "the timeout stops both", timeout: 30 * time.Millisecond, want: compiler.ReasonTimeout, stored: 0, cancels: true,
			wait: func(*overlapTokens) func(context.Context) { return func(ctx context.Context) { <-ctx.Done() } },
			before: func(*overlapTokens) func(context.Context) error {
				return func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
			}},
		{name: "shadow writes nothing", mode: compiler.ModeShadow, want: "", stored: 0,
			before: func(*overlapTokens) func(context.Context) error {
				return func(context.Context) error { return errors.New("shadow mode wrote") }
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := &overlapTokens{more: tt.more, panics: tt.panics, counted: make(chan struct{})}
			if tt.wait != nil {
				tc.wait = tt.wait(tc)
			}
			store := &overlapStore{MemStore: compilertest.NewMemStore()}
			if tt.before != nil {
				store.before = tt.before(tc)
			}
			timeout := tt.timeout
			if timeout == 0 {
				timeout = time.Minute
			}
			c := newCompiler(t, compiler.Options{Timeout: timeout}, store, tc)
			mode := tt.mode
			if mode == "" {
				mode = compiler.ModeEnforce
			}
			stopped := make(chan struct{})
			res := c.Compile(context.Background(), compiler.Request{Path: chatPath, Body: body, Scope: artifact.Scope{Tenant: "t"},
				Mode: mode, Done: func() { close(stopped) }})
			<-stopped                           // at the timeout Compile returns first; the compile stops after
			cancelled := store.cancelled.Load() // the write has stopped by now
			if res.Reason != tt.want {
				t.Fatalf("reason %q (%s), want %q", res.Reason, res.Detail, tt.want)
			}
			accepted := tt.want == "" && mode == compiler.ModeEnforce
			if accepted != !bytes.Equal(res.Body, body) || accepted != (res.Decision == compiler.Accepted) {
				t.Fatalf("%s/%s: the body went out rewritten=%v", res.Decision, res.Reason, !bytes.Equal(res.Body, body))
			}
			if accepted {
				for _, a := range store.All("t") {
					if g, ok, err := store.Get(context.Background(), "t", a.Digest); !ok || err != nil || g.Text != o {
						t.Fatalf("a receipt went out for an artifact not readable: %v %v", ok, err)
					}
				}
			}
			if store.Len() != tt.stored {
				t.Fatalf("%d artifacts stored, want %d", store.Len(), tt.stored)
			}
			if cancelled != tt.cancels {
				t.Fatalf("the write saw its context cancelled: %v, want %v", cancelled, tt.cancels)
			}
			if res.Vault <= 0 && mode == compiler.ModeEnforce && tt.want != compiler.ReasonTimeout && tt.want != compiler.ReasonPanic {
				t.Fatalf("Vault %v: the overlapped write's time is not reported", res.Vault)
			}
		})
	}
}
