package compiler_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// codexRerun is call n's output holding the content of call seed's.
func codexRerun(n, seed int) string {
	return fmt.Sprintf(`{"type":"function_call_output","id":"fco_%d","call_id":"call_%d","output":%s,%s}`, n, n, jsonStr(fixtures.ToolOutput(seed, 9000)), meta(n))
}

// A continuation's result that repeats content its chain already holds
// inline (Request.HeldInline) is leased: the model reads the earlier copy
// in what the provider keeps for the chain. Its first exposure never is,
// nor a repeat the caller does not name as held inline (a later whole
// body may have receipted it), nor one in a body that continues no
// response (there the set is ignored: a whole body holding both copies
// keeps the unanswered one inline).
func TestContinuationLease(t *testing.T) {
	tests := []struct {
		name   string
		seed   int  // the second continuation's content: call 1's (a repeat) or its own
		held   int  // 1: HeldInline is the first continuation's Result.Inline; 2: another digest; 0: none
		whole  bool // the second body is the whole history, naming no previous_response_id
		leases int  // Options.InlineLeases
		// receipts and leases in the second body
		wantReceipts, wantLeases int
	}{
		{name: "repeat held inline", seed: 1, held: 1, leases: 1, wantReceipts: 1, wantLeases: 1},
		{name: "repeat not named held", seed: 1, leases: 1},
		{name: "repeat, another digest held", seed: 1, held: 2, leases: 1},
		{name: "first exposure", seed: 2, held: 1, leases: 1},
		{name: "leases off", seed: 1, held: 1},
		{name: "exposures short of the lease", seed: 1, held: 1, leases: 2},
		{name: "whole body", seed: 1, held: 1, whole: true, leases: 1, wantReceipts: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCompiler(t, compiler.Options{InlineLeases: tt.leases}, compilertest.NewMemStore(), nil)
			scope := artifact.Scope{Tenant: "A"}
			compile := func(body []byte, cont *compiler.Chain, held []artifact.Digest) compiler.Result {
				return c.Compile(context.Background(), compiler.Request{Path: responsesPath, Body: body, Scope: scope,
					Mode: compiler.ModeEnforce, Continues: cont, Chained: true, HeldInline: held})
			}
			history := []string{`{"type":"message","role":"developer","content":[{"type":"input_text","text":"You are Codex."}]}`, codexUser("fix the bug")}
			open := compile(socketBody("", history), nil, nil)
			node, _ := compiler.Continue(open.Chain, completedEvent("resp_0", codexCall(1).provider))
			first := compile(socketBody("resp_0", []string{codexOutput(1)}), &node, open.Inline)
			if first.Receipts != 0 || len(first.Inline) != 1 {
				t.Fatalf("first continuation: %d receipts, inline %d, want 0 and 1", first.Receipts, len(first.Inline))
			}
			var held []artifact.Digest
			switch tt.held {
			case 1:
				held = first.Inline
			case 2:
				held = []artifact.Digest{{7}}
			}
			node, _ = compiler.Continue(first.Chain, completedEvent("resp_1", codexCall(2).provider))
			cont := &node
			body := socketBody("resp_1", []string{codexRerun(2, tt.seed)})
			if tt.whole {
				history = append(append(history, codexCall(1).client...), codexOutput(1))
				history = append(append(history, codexCall(2).client...), codexRerun(2, tt.seed))
				body, cont = socketBody("", history), nil
			}
			res := compile(body, cont, held)
			if res.Receipts != tt.wantReceipts || res.Kinds.Lease != tt.wantLeases {
				t.Fatalf("second body: %d receipts (%d leases; %s/%s), want %d (%d)", res.Receipts, res.Kinds.Lease, res.Decision, res.Reason, tt.wantReceipts, tt.wantLeases)
			}
			assertValidRewrite(t, responsesPath, body, res)
			// The unanswered result is reported inline unless it was leased
			// (the whole body's older copy is its duplicate's receipt).
			if len(res.Inline) != 1-tt.wantLeases || tt.seed == 1 && len(res.Inline) == 1 && res.Inline[0] != first.Inline[0] {
				t.Fatalf("inline %x, want %d digest(s) (call 1's: %x)", res.Inline, 1-tt.wantLeases, first.Inline)
			}
		})
	}
}

// A continuation found on its chain is priced like any body (the cost
// model renders every unit of it, previous_response_id included), so the
// never-dearer veto judges it; and whichever variant plan is chosen, the
// continuation's record keeps the cache state of the last whole body.
func TestContinuationPricedAndRecorded(t *testing.T) {
	store := compilertest.NewMemStore()
	c := newCompiler(t, compiler.Options{InlineLeases: 1}, store, nil)
	scope := artifact.Scope{Tenant: "A"}
	ctx := context.Background()
	compile := func(body []byte, cont *compiler.Chain, held []artifact.Digest) compiler.Result {
		return c.Compile(ctx, compiler.Request{Path: responsesPath, Body: body, Scope: scope,
			Mode: compiler.ModeEnforce, Continues: cont, Chained: true, HeldInline: held})
	}
	recorded := func(end artifact.Digest) artifact.Lineage {
		t.Helper()
		lin, err := store.Ancestor(ctx, scope, []artifact.Digest{end, {0xff}})
		if err != nil || !lin.Found || lin.Ancestor != end {
			t.Fatalf("no record at %x: %+v, %v", end, lin, err)
		}
		return lin
	}
	history := []string{`{"type":"message","role":"developer","content":[{"type":"input_text","text":"You are Codex."}]}`, codexUser("fix the bug")}
	open := compile(socketBody("", history), nil, nil)
	node, _ := compiler.Continue(open.Chain, completedEvent("resp_0", codexCall(1).provider))
	first := compile(socketBody("resp_0", []string{codexOutput(1)}), &node, open.Inline)
	if first.CostRaw <= 0 {
		t.Fatalf("first continuation priced at %v", first.CostRaw)
	}
	if got, want := recorded(first.Chain.End), recorded(open.Chain.End); len(want.Cache) == 0 || string(got.Cache) != string(want.Cache) {
		t.Fatalf("continuation recorded cache state %x, want the opening's %x", got.Cache, want.Cache)
	}
	node, _ = compiler.Continue(first.Chain, completedEvent("resp_1", codexCall(2).provider))
	body := socketBody("resp_1", []string{codexRerun(2, 1)})
	res := compile(body, &node, first.Inline)
	if res.Kinds.Lease != 1 || res.CostRaw <= 0 || res.CostSent >= res.CostRaw {
		t.Fatalf("leased continuation: %d leases, cost %v -> %v (%s/%s); want a lease priced cheaper", res.Kinds.Lease, res.CostRaw, res.CostSent, res.Decision, res.Reason)
	}
	assertValidRewrite(t, responsesPath, body, res)
}
