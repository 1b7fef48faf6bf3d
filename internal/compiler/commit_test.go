package compiler_test

import (
	"context"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// With DeferCommit the lineage is written only when the caller runs
// res.Commit (the gateway does once the provider answered 2xx): a request
// that was never committed leaves no inline delivery behind, in enforce and
// in shadow mode alike.
func TestDeferredCommit(t *testing.T) {
	turns := fixtures.Turns(40, 2, 9000)
	step1 := fixtures.ChatBody("gpt-4o", turns[:1], "")
	step2 := fixtures.ChatBody("gpt-4o", turns[:2], "")
	for _, mode := range []compiler.Mode{compiler.ModeEnforce, compiler.ModeShadow} {
		for _, commit := range []bool{false, true} {
			name := string(mode)
			if commit {
				name += "/committed"
			}
			t.Run(name, func(t *testing.T) {
				store := compilertest.NewMemStore()
				c := newCompiler(t, compiler.Options{InlineLeases: 1}, store, nil)
				req := func(body []byte, m compiler.Mode) compiler.Request {
					return compiler.Request{Path: chatPath, Body: body, Scope: artifact.Scope{Tenant: "t"}, Mode: m, DeferCommit: true}
				}
				res := c.Compile(context.Background(), req(step1, mode))
				if res.Commit == nil {
					t.Fatalf("no commit returned (%s %s)", res.Decision, res.Reason)
				}
				if commit {
					res.Commit()
				}
				// The next step is compiled in enforce mode: it carries the
				// first result as a receipt only if step 1 was committed.
				next := c.Compile(context.Background(), req(step2, compiler.ModeEnforce))
				want := 0
				if commit {
					want = 1
				}
				if next.Receipts != want {
					t.Fatalf("step 2: %d receipts (%s %s), want %d", next.Receipts, next.Decision, next.Reason, want)
				}
			})
		}
	}
}

// Without DeferCommit, Compile records by itself as before and returns no
// commit.
func TestImmediateCommit(t *testing.T) {
	turns := fixtures.Turns(50, 2, 9000)
	c := newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
	if res := compile(c, "t", fixtures.ChatBody("gpt-4o", turns[:1], "")); res.Commit != nil {
		t.Fatal("Compile without DeferCommit returned a commit")
	}
	if res := compile(c, "t", fixtures.ChatBody("gpt-4o", turns[:2], "")); res.Receipts != 1 {
		t.Fatalf("step 2: %d receipts, want 1", res.Receipts)
	}
}
