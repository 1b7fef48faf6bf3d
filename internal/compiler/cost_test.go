package compiler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func compileWhen(c *compiler.Compiler, tenant string, body []byte, at time.Time) compiler.Result {
	return c.Compile(context.Background(), compiler.Request{Path: chatPath, Body: body,
		Scope: artifact.Scope{Tenant: tenant}, Mode: compiler.ModeEnforce, Time: at})
}

// gpt5 makes a conversation body a gpt-5 request: cache reads at 0.1x, so
// rewriting a warm prefix is expensive (gpt-4o reads at 0.5x).
func gpt5(body []byte) []byte {
	return bytes.Replace(body, []byte(`"model":"gpt-4o"`), []byte(`"model":"gpt-5"`), 1)
}

// messagesEnd is where the messages array of a chat body rendered by
// conversation ends ({"messages":[...],"model":...}): the part a provider
// caches.
func messagesEnd(body []byte) int { return bytes.LastIndex(body, []byte(`],"model"`)) }

// A fold that would rewrite a warm cached prefix waits; on a cold cache
// (idle past the TTL) it goes out at once.
func TestCostFoldWaitsForColdCache(t *testing.T) {
	opts := compactOpts(2, 2)
	step1, step2 := gpt5(conversation(7, 5000, nil)), gpt5(conversation(8, 5000, nil))
	for _, tt := range []struct {
		name   string
		gap    time.Duration
		folded int
	}{
		{"warm", 30 * time.Second, 2}, // the boundary of step 1 (turn 4) is kept
		{"cold", 10 * time.Minute, 6}, // the boundary moves to turn 8
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCompiler(t, opts, compilertest.NewMemStore(), nil)
			r1 := compileWhen(c, tt.name, step1, t0)
			if r1.Decision != compiler.Accepted || r1.Folded != 2 {
				t.Fatalf("step 1: %s/%s folded %d", r1.Decision, r1.Reason, r1.Folded)
			}
			r2 := compileWhen(c, tt.name, step2, t0.Add(tt.gap))
			if r2.Decision != compiler.Accepted || r2.Folded != tt.folded {
				t.Fatalf("step 2: %s/%s folded %d, want %d", r2.Decision, r2.Reason, r2.Folded, tt.folded)
			}
			assertValidCompacted(t, step2, r2.Body)
			shared := fixtures.CommonPrefix(r1.Body, r2.Body)
			if warm := tt.name == "warm"; warm != (shared >= messagesEnd(r1.Body)) {
				t.Fatalf("step 2 shares %d bytes of step 1's %d-byte prompt", shared, messagesEnd(r1.Body))
			}
			if r2.CostSent <= 0 || r2.CostRaw <= 0 {
				t.Fatalf("costs not reported: raw %v sent %v", r2.CostRaw, r2.CostSent)
			}
		})
	}
}

func assertValidCompacted(t *testing.T, orig, out []byte) {
	t.Helper()
	if err := compiler.CheckCompacted(chatPath, orig, out); err != nil {
		t.Fatal(err)
	}
}

// A plan chosen once replays byte for byte: while the cache stays warm each
// request repeats the previous one's bytes and only appends; a retry
// compiles to the same bytes.
func TestCostStickiness(t *testing.T) {
	c := newCompiler(t, compactOpts(2, 2), compilertest.NewMemStore(), nil)
	var prev compiler.Result
	for i, turns := range []int{7, 8, 9, 10, 11} {
		body := gpt5(conversation(turns, 5000, nil))
		at := t0.Add(time.Duration(i) * 30 * time.Second)
		res := compileWhen(c, "sticky", body, at)
		if res.Decision != compiler.Accepted {
			t.Fatalf("step %d: %s/%s", i, res.Decision, res.Reason)
		}
		if again := compileWhen(c, "sticky", body, at); !bytes.Equal(again.Body, res.Body) {
			t.Fatalf("step %d: retry compiled differently", i)
		}
		if i > 0 && !bytes.HasPrefix(res.Body, prev.Body[:messagesEnd(prev.Body)]) {
			t.Fatalf("step %d: rewrote the previous request's prompt (shares %d of %d bytes)", i,
				fixtures.CommonPrefix(prev.Body, res.Body), messagesEnd(prev.Body))
		}
		prev = res
	}
}

// toolRound appends an assistant tool call and its result to msgs.
func toolRound(msgs []any, id, output string) []any {
	return append(msgs,
		map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{"id": id, "type": "function",
			"function": map[string]any{"name": "read_file", "arguments": `{"path":"a.py"}`}}}},
		map[string]any{"role": "tool", "tool_call_id": id, "content": output})
}

func chat(msgs []any) []byte {
	b, err := json.Marshal(map[string]any{"model": "gpt-5", "messages": msgs})
	if err != nil {
		panic(err)
	}
	return b
}

// Duplicates keep the cached copy: a re-read result goes inline while it is
// unanswered and, once answered, becomes a receipt naming the earlier call;
// the earlier copy, in the cached prefix, is never rewritten.
func TestCostDuplicateKeepsCachedCopy(t *testing.T) {
	opts := compiler.Options{InlineLeases: 0}
	x := fixtures.ToolOutput(77, 12000)
	base := toolRound([]any{map[string]any{"role": "user", "content": "Read a.py twice."}}, "call_a", x)
	base = append(base, map[string]any{"role": "assistant", "content": "Read it."},
		map[string]any{"role": "user", "content": strings.Repeat("More context. ", 400)})
	reread := toolRound(append([]any{}, base...), "call_b", x)
	answered := append(append([]any{}, reread...), map[string]any{"role": "assistant", "content": "Same as before."},
		map[string]any{"role": "user", "content": "Go on."})
	for _, cost := range []bool{true, false} {
		t.Run(fmt.Sprintf("cost=%v", cost), func(t *testing.T) {
			o := opts
			o.Cost.Off = !cost
			c := newCompiler(t, o, compilertest.NewMemStore(), nil)
			if r := compileWhen(c, "dup", chat(base), t0); r.Decision != compiler.Passthrough {
				t.Fatalf("step 1: %s/%s", r.Decision, r.Reason)
			}
			r2 := compileWhen(c, "dup", chat(reread), t0.Add(time.Minute))
			r3 := compileWhen(c, "dup", chat(answered), t0.Add(2*time.Minute))
			if !cost {
				// Without the cost model the newest copy stays and the
				// earlier one, deep in the prompt, is receipted.
				if r3.Decision != compiler.Accepted || bytes.Contains(r3.Body[:bytes.Index(r3.Body, []byte("call_b"))], []byte(x[:200])) {
					t.Fatalf("cost off: %s/%s", r3.Decision, r3.Reason)
				}
				return
			}
			// Step 2: the new copy is unanswered, the old one cached: nothing
			// may change.
			if r2.Decision != compiler.Passthrough || r2.Reason != compiler.ReasonNothingToDo {
				t.Fatalf("step 2: %s/%s", r2.Decision, r2.Reason)
			}
			if r3.Decision != compiler.Accepted || r3.Receipts != 1 {
				t.Fatalf("step 3: %s/%s receipts %d", r3.Decision, r3.Reason, r3.Receipts)
			}
			// The earlier copy is intact and the receipt names its call.
			cut := bytes.Index(r3.Body, []byte(`"call_b"`))
			if !bytes.HasPrefix(r3.Body, chat(answered)[:cut]) {
				t.Fatal("the cached copy was rewritten")
			}
			if n := bytes.Count(r3.Body, []byte(artifact.ReceiptPrefix)); n != 1 || !bytes.Contains(r3.Body, []byte(" | same_as=call_a]")) {
				t.Fatalf("%d receipts, same_as missing: %s", n, r3.Body[cut:])
			}
			assertSpliced(t, chat(answered), r3.Body)
		})
	}
}

// The third veto: when every rewrite would cost more than the original
// (a lease receipt deep in a warm cached prefix, with much prompt after
// it), the original goes out as not_cheaper; past the TTL the same request
// is rewritten.
func TestCostNotCheaper(t *testing.T) {
	x := fixtures.ToolOutput(78, 9000)
	step1 := toolRound([]any{map[string]any{"role": "user", "content": "Read a.py."}}, "call_a", x)
	step1 = append(step1, map[string]any{"role": "assistant", "content": "Done."})
	for i := 0; i < 40; i++ {
		step1 = append(step1, map[string]any{"role": "user", "content": fmt.Sprintf("Question %d: %s", i, strings.Repeat("why? ", 200))},
			map[string]any{"role": "assistant", "content": strings.Repeat("Because. ", 100)})
	}
	step2 := append(append([]any{}, step1...), map[string]any{"role": "user", "content": "One more."})
	for _, tt := range []struct {
		gap    time.Duration
		want   compiler.Decision
		reason compiler.Reason
	}{
		{time.Minute, compiler.Passthrough, compiler.ReasonNotCheaper},
		{time.Hour, compiler.Accepted, ""},
	} {
		c := newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
		if r := compileWhen(c, "veto", chat(step1), t0); r.Decision != compiler.Passthrough {
			t.Fatalf("step 1: %s/%s", r.Decision, r.Reason)
		}
		r := compileWhen(c, "veto", chat(step2), t0.Add(tt.gap))
		if r.Decision != tt.want || r.Reason != tt.reason {
			t.Fatalf("gap %v: %s/%s, want %s/%s", tt.gap, r.Decision, r.Reason, tt.want, tt.reason)
		}
		if r.Decision == compiler.Passthrough && (!bytes.Equal(r.Body, chat(step2)) || r.CostSent != r.CostRaw) {
			t.Fatalf("gap %v: pass-through is not the original at the original's cost", tt.gap)
		}
		if r.Decision == compiler.Accepted && r.CostSent >= r.CostRaw {
			t.Fatalf("gap %v: accepted at %v >= raw %v", tt.gap, r.CostSent, r.CostRaw)
		}
	}
}

// The calibration hook: a response that read nothing from the cache where
// the decision expected a read marks the cache cold, so the next request
// may move the fold boundary at once.
func TestCostUsageMarksCacheCold(t *testing.T) {
	for _, tt := range []struct {
		name   string
		usage  provider.Usage
		folded int
	}{
		{"cache read", provider.Usage{Known: true, Input: 9000, CacheRead: 8000}, 2},
		{"no cache read", provider.Usage{Known: true, Input: 9000}, 6},
		{"usage unknown", provider.Usage{}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Cache reads at 0.01x (an override): only a cold cache makes a
			// rewrite of the prefix worth it.
			opts := compactOpts(2, 2)
			read := 0.01
			opts.Cost.OpenAI.CacheRead = &read
			c := newCompiler(t, opts, compilertest.NewMemStore(), nil)
			compileWhen(c, "u", gpt5(conversation(7, 5000, nil)), t0)
			r2 := compileWhen(c, "u", gpt5(conversation(7, 5000, func(m []any) []any {
				return append(m, map[string]any{"role": "user", "content": "and?"})
			})), t0.Add(20*time.Second))
			if r2.Decision != compiler.Accepted || r2.Folded != 2 {
				t.Fatalf("step 2: %s/%s folded %d", r2.Decision, r2.Reason, r2.Folded)
			}
			c.ObserveUsage(r2, tt.usage)
			r3 := compileWhen(c, "u", gpt5(conversation(7, 5000, func(m []any) []any {
				return append(m, map[string]any{"role": "user", "content": "and?"},
					map[string]any{"role": "assistant", "content": "Nothing else."},
					map[string]any{"role": "user", "content": "Thanks."})
			})), t0.Add(40*time.Second))
			if r3.Folded != tt.folded {
				t.Fatalf("step 3: %s/%s folded %d, want %d", r3.Decision, r3.Reason, r3.Folded, tt.folded)
			}
		})
	}
}
