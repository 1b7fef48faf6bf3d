package compiler_test

import (
	"bytes"
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// precountTokens counts bytes as tokens; a count of a body that carries no
// receipt and is not gate (the original of a gated request) is reported on
// bg and, while block is open, waits for it.
type precountTokens struct {
	gate  []byte // the original body of a request the gate counts
	block chan struct{}
	bg    chan precountCall
	mu    sync.Mutex
	calls int
}

type precountCall struct {
	body  []byte
	hints int
	held  bool // the body's hold was held during the count
}

func (p *precountTokens) Count(ctx context.Context, model string, body []byte) artifact.TokenCount {
	return p.CountHeld(ctx, model, body, nil, nil)
}

func (p *precountTokens) CountHinted(ctx context.Context, model string, body []byte, hints []int) artifact.TokenCount {
	return p.CountHeld(ctx, model, body, hints, nil)
}

func (p *precountTokens) CountHeld(_ context.Context, _ string, body []byte, hints []int, hold artifact.Hold) artifact.TokenCount {
	if !bytes.Contains(body, []byte(artifact.ReceiptPrefix)) && !bytes.Equal(body, p.gate) {
		p.mu.Lock()
		p.calls++
		p.mu.Unlock()
		held := false
		if hold != nil {
			if release, ok := hold(); ok {
				held = true
				release()
			}
		}
		if p.block != nil {
			<-p.block
		}
		p.bg <- precountCall{body: bytes.Clone(body), hints: len(hints), held: held}
	}
	return artifact.TokenCount{N: len(body), Encoding: "fake", Exact: true, Status: artifact.TokensExact}
}

// TestPrecountAfterNothingToReplace: a request whose eligible results all
// go inline (nothing to replace) has its body counted in the background, by
// message and under its hold, so the next request's gate finds the counts
// cached; one such count runs at a time; a request the gate counts itself,
// or without eligible results, starts none.
func TestPrecountAfterNothingToReplace(t *testing.T) {
	delivery := fixtures.ChatBody("gpt-4o", fixtures.Turns(71, 1, 9000), "")
	o := fixtures.ToolOutput(74, 9000)
	dup := fixtures.ChatBody("gpt-4o", []fixtures.ChatTurn{{Tool: "bash", Output: o}, {Tool: "bash", Output: o}}, "")
	small := fixtures.ChatBody("gpt-4o", []fixtures.ChatTurn{{Tool: "bash", Output: "ok"}}, "")
	tests := []struct {
		name     string
		body     []byte
		withHold bool
		want     compiler.Reason
		counted  bool
	}{
		{"nothing to replace, held body", delivery, true, compiler.ReasonNothingToDo, true},
		{"nothing to replace, no hold: a copy", delivery, false, compiler.ReasonNothingToDo, true},
		{"no eligible result", small, true, compiler.ReasonNoSlots, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc := &precountTokens{bg: make(chan precountCall, 4)}
			c := newCompiler(t, compiler.Options{InlineLeases: 1, WorkAhead: true}, compilertest.NewMemStore(), tc)
			var holds, released atomic.Int32
			req := compiler.Request{Path: chatPath, Body: bytes.Clone(tt.body), Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce}
			if tt.withHold {
				req.Hold = func() (func(), bool) { holds.Add(1); return func() { released.Add(1) }, true }
			}
			res := c.Compile(context.Background(), req)
			if res.Reason != tt.want || res.Tokens.Status != "" {
				t.Fatalf("%s/%s tokens %q, want %s unmeasured", res.Decision, res.Reason, res.Tokens.Status, tt.want)
			}
			if !tt.counted {
				// A gated request's counts go through the gate; the
				// background count would have arrived by then.
				tc.gate = dup
				if r := compile(c, "t", dup); r.Tokens.Status != artifact.TokensExact {
					t.Fatalf("the next request was not gated: %s/%s", r.Decision, r.Reason)
				}
				if tc.calls != 0 {
					t.Fatalf("%d background counts of a request without eligible results", tc.calls)
				}
				return
			}
			clear(req.Body) // the caller reuses its buffer: a held count reads the held bytes, a copy its own
			got := <-tc.bg
			if tt.withHold {
				if !got.held {
					t.Fatal("the body's hold was not held during the background count")
				}
				for holds.Load() != released.Load() {
					runtime.Gosched() // the count's own hold goes once it has returned
				}
				if holds.Load() < 2 {
					t.Fatalf("hold taken %d times, want the background count's and the counter's", holds.Load())
				}
				return
			}
			if !bytes.Equal(got.body, tt.body) || got.hints == 0 {
				t.Fatalf("background count of %d bytes with %d hints, want the original's %d bytes by message", len(got.body), got.hints, len(tt.body))
			}
		})
	}
}

// TestPrecountOneAtATime: while one background count runs, another
// request with nothing to replace starts none.
func TestPrecountOneAtATime(t *testing.T) {
	turns := fixtures.Turns(72, 1, 9000)
	other := fixtures.Turns(73, 1, 9000)
	tc := &precountTokens{bg: make(chan precountCall, 4), block: make(chan struct{})}
	c := newCompiler(t, compiler.Options{WorkAhead: true}, compilertest.NewMemStore(), tc)
	first := compile(c, "t", fixtures.ChatBody("gpt-4o", turns, ""))
	for tc.countCalls() == 0 {
		// the first count has started once it is counted as called
		runtime.Gosched()
	}
	second := compile(c, "t", fixtures.ChatBody("gpt-4o", other, ""))
	if first.Reason != compiler.ReasonNothingToDo || second.Reason != compiler.ReasonNothingToDo {
		t.Fatalf("reasons %s, %s", first.Reason, second.Reason)
	}
	close(tc.block)
	<-tc.bg
	if n := tc.countCalls(); n != 1 {
		t.Fatalf("%d background counts ran, want 1", n)
	}
}

func (p *precountTokens) countCalls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}
