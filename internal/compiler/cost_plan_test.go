package compiler_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// A result below min_artifact_chars but from cost_lease_min_chars up is
// leased once answered when the cost model is on (right after its answer
// only the tail of the cached prompt changes, and the receipt saves most
// of it on every following request); with the cost model off, or below
// the lease minimum, it stays inline.
func TestCostSmallResultLease(t *testing.T) {
	x := fixtures.ToolOutput(81, 3000)
	step1 := toolRound([]any{map[string]any{"role": "system", "content": strings.Repeat("You are a careful agent. ", 300)},
		map[string]any{"role": "user", "content": "Read a.py."}}, "call_a", x)
	step2 := toolRound(append([]any{}, step1...), "call_b", "ok")
	for _, tt := range []struct {
		name     string
		off      bool
		leaseMin int
		receipts int
		reason   compiler.Reason
	}{
		{name: "cost on", receipts: 1},
		{name: "cost off", off: true, reason: compiler.ReasonNoSlots},
		{name: "below the lease minimum", leaseMin: 3500, reason: compiler.ReasonNoSlots},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts := compiler.Options{InlineLeases: 1}
			opts.Cost.Off, opts.Cost.LeaseMinChars = tt.off, tt.leaseMin
			c := newCompiler(t, opts, compilertest.NewMemStore(), nil)
			r1 := compileWhen(c, "small", chat(step1), t0)
			if r1.Receipts != 0 {
				t.Fatalf("step 1 (unanswered): %d receipts", r1.Receipts)
			}
			r2 := compileWhen(c, "small", chat(step2), t0.Add(20*time.Second))
			if r2.Receipts != tt.receipts || r2.Reason != tt.reason {
				t.Fatalf("step 2: %s/%s receipts %d, want %d (%s)", r2.Decision, r2.Reason, r2.Receipts, tt.receipts, tt.reason)
			}
			if tt.receipts > 0 {
				assertSpliced(t, chat(step2), r2.Body)
				// Only the tail changed: everything before the leased
				// result is the cached prompt, byte for byte.
				quoted, _ := json.Marshal(x)
				if cut := bytes.Index(chat(step2), quoted[:100]); cut < 0 || !bytes.HasPrefix(r2.Body, chat(step2)[:cut]) {
					t.Fatal("the prompt before the leased result changed")
				}
				if r2.CostHorizonSent > r2.CostHorizonRaw {
					t.Fatalf("accepted dearer over the horizon: %v > %v", r2.CostHorizonSent, r2.CostHorizonRaw)
				}
			}
		})
	}
}

// anthropicBody is a Claude Code-shaped Messages request: a system prompt
// with a breakpoint, a long first user message, one tool round per output,
// and a single moving breakpoint on the newest block.
func anthropicBody(outputs ...string) []byte {
	msgs := []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text",
		"text": "Fix the bug. " + strings.Repeat("Context of the repository. ", 400)}}}}
	var newest map[string]any
	for i, out := range outputs {
		id := "toolu_" + string(rune('a'+i))
		msgs = append(msgs, map[string]any{"role": "assistant", "content": []any{
			map[string]any{"type": "tool_use", "id": id, "name": "Read", "input": map[string]any{"path": "a.py"}}}})
		newest = map[string]any{"type": "tool_result", "tool_use_id": id, "content": out}
		msgs = append(msgs, map[string]any{"role": "user", "content": []any{newest}})
	}
	newest["cache_control"] = map[string]any{"type": "ephemeral"}
	b, err := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": msgs,
		"system": []any{map[string]any{"type": "text", "text": strings.Repeat("You are an agent. ", 300),
			"cache_control": map[string]any{"type": "ephemeral"}}}})
	if err != nil {
		panic(err)
	}
	return b
}

// With one moving cache_control breakpoint the provider holds the previous
// prompt only as a whole: leasing the result just answered rewrites every
// message after the system prompt (written again at 1.25x), so on a warm
// cache the result stays inline (the stable plan; nothing else to do: the
// original goes out as not_cheaper). On a cold cache everything is written
// anyway and the lease goes out.
func TestCostBreakpointLeaseWaitsForColdCache(t *testing.T) {
	x := fixtures.ToolOutput(82, 3000)
	step1, step2 := anthropicBody(x), anthropicBody(x, "ok")
	for _, tt := range []struct {
		gap      time.Duration
		receipts int
		reason   compiler.Reason
	}{
		{20 * time.Second, 0, compiler.ReasonNotCheaper},
		{10 * time.Minute, 1, ""},
	} {
		c := newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
		req := func(body []byte, at time.Time) compiler.Result {
			return c.Compile(t.Context(), compiler.Request{Path: messagesPath, Body: body,
				Scope: artifact.Scope{Tenant: "bp"}, Mode: compiler.ModeEnforce, Time: at})
		}
		if r := req(step1, t0); r.Receipts != 0 {
			t.Fatalf("step 1: %d receipts", r.Receipts)
		}
		r := req(step2, t0.Add(tt.gap))
		if r.Receipts != tt.receipts || r.Reason != tt.reason {
			t.Fatalf("gap %v: %s/%s receipts %d, want %d (%s)", tt.gap, r.Decision, r.Reason, r.Receipts, tt.receipts, tt.reason)
		}
		switch r.Decision {
		case compiler.Accepted:
			if err := compiler.CheckCompacted(messagesPath, step2, r.Body); err != nil {
				t.Fatal(err)
			}
			if r.CostHorizonSent > r.CostHorizonRaw {
				t.Fatalf("gap %v: accepted dearer over the horizon: %v > %v", tt.gap, r.CostHorizonSent, r.CostHorizonRaw)
			}
		default:
			if !bytes.Equal(r.Body, step2) || r.CostHorizonSent != r.CostHorizonRaw || r.CostSent != r.CostRaw {
				t.Fatalf("gap %v: pass-through is not the original at the original's cost", tt.gap)
			}
		}
	}
}
