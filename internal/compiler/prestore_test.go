package compiler_test

import (
	"bytes"
	"context"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// prestoreStore holds every Missing call until gate is closed (nil: no
// wait) and reports each Persist's end on persisted.
type prestoreStore struct {
	*compilertest.MemStore
	gate      chan struct{}
	persisted chan error
}

func (s *prestoreStore) Missing(ctx context.Context, scope artifact.Scope, ds []artifact.Digest) ([]artifact.Digest, error) {
	if s.gate != nil {
		<-s.gate
	}
	return s.MemStore.Missing(ctx, scope, ds)
}

func (s *prestoreStore) Persist(ctx context.Context, scope artifact.Scope, arts []artifact.Artifact) error {
	err := s.MemStore.Persist(ctx, scope, arts)
	s.persisted <- err
	return err
}

// TestPrestoreAfterNothingToReplace: a request whose eligible results all
// go inline has them written in the background (from the body under its
// hold, or from a copy of it), so the next request, which receipts them,
// finds them stored and writes nothing more; shadow mode writes nothing.
func TestPrestoreAfterNothingToReplace(t *testing.T) {
	turns := fixtures.Turns(81, 3, 9000)
	delivery, next := fixtures.ChatBody("gpt-4o", turns[:2], ""), fixtures.ChatBody("gpt-4o", turns, "")
	tests := []struct {
		name     string
		mode     compiler.Mode
		withHold bool
		stores   int
		off      bool // WorkAhead off
	}{
		{"held body", compiler.ModeEnforce, true, 2, false},
		{"no hold: a copy, the caller's buffer reused at once", compiler.ModeEnforce, false, 2, false},
		{"shadow", compiler.ModeShadow, true, 0, false},
		{"work ahead off", compiler.ModeEnforce, true, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := &prestoreStore{MemStore: compilertest.NewMemStore(), gate: make(chan struct{}), persisted: make(chan error, 4)}
			c := newCompiler(t, compiler.Options{InlineLeases: 1, WorkAhead: !tt.off}, store, nil)
			req := compiler.Request{Path: chatPath, Body: bytes.Clone(delivery), Scope: artifact.Scope{Tenant: "t"}, Mode: tt.mode}
			var holds, released atomic.Int32
			if tt.withHold {
				req.Hold = func() (func(), bool) { holds.Add(1); return func() { released.Add(1) }, true }
			}
			res := c.Compile(context.Background(), req)
			if res.Reason != compiler.ReasonNothingToDo || store.Len() != 0 && tt.stores == 0 {
				t.Fatalf("%s/%s, %d stored", res.Decision, res.Reason, store.Len())
			}
			if tt.stores == 0 {
				close(store.gate)
				if r := compile(c, "t", next); r.Receipts != 2 || store.Persisted != 2 {
					t.Fatalf("next request: %d receipts, %d written", r.Receipts, store.Persisted)
				}
				return
			}
			if !tt.withHold {
				clear(req.Body)
			}
			close(store.gate) // the background write's Missing: only once the caller's buffer is gone
			if err := <-store.persisted; err != nil {
				t.Fatalf("background write: %v", err)
			}
			for released.Load() != holds.Load() {
				runtime.Gosched() // the write gives its hold back once Persist has returned
			}
			if store.Len() != tt.stores || (tt.withHold && holds.Load() != 1) {
				t.Fatalf("%d stored, want %d; hold taken %d times", store.Len(), tt.stores, holds.Load())
			}
			for i, turn := range turns[:2] {
				if d := storedDigest(store.MemStore, "t", turn.Output); d == (artifact.Digest{}) {
					t.Fatalf("result %d not stored as sent", i)
				}
			}
			written := store.Persisted
			r := compile(c, "t", next)
			if r.Decision != compiler.Accepted || r.Receipts != 2 {
				t.Fatalf("next request: %s/%s with %d receipts", r.Decision, r.Reason, r.Receipts)
			}
			if store.Persisted != written {
				t.Fatalf("the next request wrote %d artifacts again", store.Persisted-written)
			}
		})
	}
}
