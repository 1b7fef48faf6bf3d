package compiler_test

import (
	"context"
	"sync"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// callCounter counts bytes (one token each) and records which bodies it
// was asked about, by length.
type callCounter struct {
	mu     sync.Mutex
	calls  map[int]int
	status artifact.TokenStatus
}

func (c *callCounter) Count(_ context.Context, _ string, body []byte) artifact.TokenCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[len(body)]++
	return artifact.TokenCount{N: len(body), Encoding: "fake", Exact: true, Status: c.status}
}

// The token gate counts an original body resent whole once: the resend
// takes the count from the compiler's memory, with the same figures, and
// still counts its rewrite. A count cut short by the budget is not kept.
func TestRawCountRemembered(t *testing.T) {
	turns := fixtures.Turns(40, 4, 3000)
	body := fixtures.ChatBody("gpt-4o", turns, "")
	for _, tc := range []struct {
		status      artifact.TokenStatus
		countsAfter int // counts of the original after the resend
	}{
		{"exact", 1},
		{"budget", 2},
	} {
		t.Run(string(tc.status), func(t *testing.T) {
			tokens := &callCounter{calls: map[int]int{}, status: tc.status}
			c := newCompiler(t, compiler.Options{InlineLeases: 1, MinArtifactChars: 1000}, compilertest.NewMemStore(), tokens)
			compile(c, "t", fixtures.ChatBody("gpt-4o", turns[:3], ""))
			first := compile(c, "t", body)
			if first.Receipts == 0 {
				t.Fatalf("setup: no receipts (%s %s)", first.Reason, first.Detail)
			}
			before := tokens.calls[len(body)]
			second := compile(c, "t", body)
			if got := tokens.calls[len(body)] - before + 1; got != tc.countsAfter {
				t.Fatalf("original counted %d times over the two requests, want %d", got, tc.countsAfter)
			}
			if tokens.calls[len(second.Body)] == 0 && second.Decision == compiler.Accepted {
				t.Fatal("the rewrite was not counted")
			}
			if second.Tokens != first.Tokens || string(second.Body) != string(first.Body) {
				t.Fatalf("resend: tokens %+v body %d bytes, first %+v %d bytes", second.Tokens, len(second.Body), first.Tokens, len(first.Body))
			}
		})
	}
}
