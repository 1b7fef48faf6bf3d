package compiler_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
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
		t.Run(string(o.Format), func(t *testing.T) {
			opts := opts
			if o.Client != "" {
				opts = costed // real clients' sessions with the cost decision
			}
			with := newCompiler(t, opts, compilertest.NewMemStore(), nil)
			without := newCompiler(t, opts, compilertest.NewMemStore(), nil)
			var scratch compiler.Scratch
			receipts, folded := 0, 0
			for step, r := range fixtures.Session(o) {
				req := compiler.Request{Path: r.Path, Body: r.Body, Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce, DeferCommit: true}
				want := without.Compile(context.Background(), req)
				req.Scratch = &scratch
				got := with.Compile(context.Background(), req)
				for _, r := range []compiler.Result{want, got} {
					if r.Commit != nil {
						r.Commit()
					}
				}
				scratch.ResetPoisoned(1 << 20)
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

// blockingStore holds every Ancestor call until released: a compile
// waiting there has parsed its trees and still uses them.
type blockingStore struct {
	artifact.Store
	entered chan struct{}
	release chan struct{}
}

func (s *blockingStore) Ancestor(ctx context.Context, scope artifact.Scope, chain []artifact.Digest) (artifact.Lineage, error) {
	s.entered <- struct{}{}
	<-s.release
	return s.Store.Ancestor(ctx, scope, chain)
}

// TestScratchLetsAnAbandonedCompileKeepItsTrees: a compile abandoned at
// its timeout goes on using its trees, so a Reset of its Scratch before
// the compile stops lets that memory go instead of overwriting it, and the
// Scratch serves the next compile as new.
func TestScratchLetsAnAbandonedCompileKeepItsTrees(t *testing.T) {
	turns := fixtures.Turns(9, 8, 9000)
	prev, body := fixtures.ChatBody("gpt-4o", turns[:7], ""), fixtures.ChatBody("gpt-4o", turns, "")
	store := &blockingStore{Store: compilertest.NewMemStore(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	slow := newCompiler(t, compiler.Options{InlineLeases: 1, Timeout: 50 * time.Millisecond}, store, nil)
	var scratch compiler.Scratch
	stopped := make(chan struct{})
	req := compiler.Request{Path: chatPath, Body: body, Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce,
		Scratch: &scratch, Done: func() { close(stopped) }}
	res := slow.Compile(context.Background(), req)
	<-store.entered
	if res.Reason != compiler.ReasonTimeout {
		t.Fatalf("%s/%s, want a timeout", res.Decision, res.Reason)
	}
	scratch.ResetPoisoned(1 << 20) // while the compile still reads its trees
	if n := scratch.Bytes(); n != 0 {
		t.Fatalf("the Reset of a busy scratch kept %d bytes for the next compile", n)
	}
	close(store.release)
	<-stopped

	fast := func(s *compiler.Scratch) compiler.Result {
		c := newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
		compile(c, "t", prev)
		return c.Compile(context.Background(), compiler.Request{Path: chatPath, Body: body, Scope: artifact.Scope{Tenant: "t"},
			Mode: compiler.ModeEnforce, Scratch: s})
	}
	want, got := fast(nil), fast(&scratch)
	if want.Receipts == 0 || !bytes.Equal(got.Body, want.Body) {
		t.Fatalf("after the abandoned compile: %d receipts with the scratch, %d without, bodies equal %v",
			got.Receipts, want.Receipts, bytes.Equal(got.Body, want.Body))
	}
	if scratch.Bytes() == 0 {
		t.Fatal("the next compile did not use the scratch")
	}
}
