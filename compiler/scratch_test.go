package compiler_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/compiler"
	"github.com/tokenterminator/caddy-token-terminator/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// TestScratchServesCompileAfterCompile: a session's requests, in every
// format, compiled one after another with one Scratch (reset, poisoned,
// after each, once its Commit ran) come out byte for byte as without it,
// with the same decisions: no compile reads the trees of the one before,
// and none needs its own after its reset.
func TestScratchServesCompileAfterCompile(t *testing.T) {
	opts := compiler.Options{InlineLeases: 1, Compaction: compiler.Compaction{Enabled: true, MinVaultChars: 4000, CollapseAfterTurns: 4, InlineRecentTurns: 2}}
	costed := opts
	opts.Cost.Off = true // so old turns fold (the cost model keeps a warm cache's prefix)
	for _, o := range []fixtures.SessionOptions{
		{Format: "openai_chat", ReReadEvery: 5},
		{Format: "openai_responses", Client: "codex"},
		{Format: "anthropic_messages", Client: "claude-code", ReReadEvery: 4},
	} {
		o.Steps, o.PersonTurns, o.OutputChars, o.Seed = 40, 10, 6000, 3
		t.Run(o.Format, func(t *testing.T) {
			opts := opts
			if o.Client != "" {
				opts = costed // real clients' sessions with the cost decision
			}
			with := newCompiler(t, opts, compilertest.NewMemStore(), nil)
			without := newCompiler(t, opts, compilertest.NewMemStore(), nil)
			var scratch compiler.Scratch
			receipts, folded := 0, 0
			for step, r := range fixtures.Session(o) {
				req := compiler.Request{Path: r.Path, Body: r.Body, Scope: compiler.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce, DeferCommit: true}
				want := without.Compile(context.Background(), req)
				req.Scratch = &scratch
				got := with.Compile(context.Background(), req)
				for _, r := range []compiler.Result{want, got} {
					if r.Commit != nil {
						r.Commit()
					}
				}
				scratch.ResetPoisoned()
				if !bytes.Equal(got.Body, want.Body) || fmt.Sprint(got.Decision, got.Reason, got.Receipts, got.Folded) != fmt.Sprint(want.Decision, want.Reason, want.Receipts, want.Folded) {
					t.Fatalf("step %d: with a scratch %s/%s receipts=%d folded=%d, without %s/%s receipts=%d folded=%d",
						step, got.Decision, got.Reason, got.Receipts, got.Folded, want.Decision, want.Reason, want.Receipts, want.Folded)
				}
				receipts, folded = receipts+got.Receipts, folded+got.Folded
			}
			if receipts == 0 || (folded == 0 && opts.Cost.Off) {
				t.Fatalf("the session made %d receipts and folded %d turns: it should test both", receipts, folded)
			}
		})
	}
}
