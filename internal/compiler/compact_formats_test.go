package compiler_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// anthropicConversation renders n turns: user text, assistant thinking +
// tool_use, user tool_result, assistant text. With mixed, every turn after
// the first starts with a user message that answers the previous turn's
// last tool call and adds text (as Claude Code does), so turn boundaries
// carry tool results.
func anthropicConversation(n int, mixed bool) []byte {
	var msgs []any
	for t := 0; t < n; t++ {
		id := fmt.Sprintf("toolu_%02d", t)
		userBlocks := []any{map[string]any{"type": "text", "text": fmt.Sprintf("Question %d", t)}}
		if mixed && t > 0 {
			userBlocks = append([]any{map[string]any{"type": "tool_result", "tool_use_id": fmt.Sprintf("toolu_x%02d", t-1), "content": "ok"}}, userBlocks...)
		}
		msgs = append(msgs,
			map[string]any{"role": "user", "content": userBlocks},
			map[string]any{"role": "assistant", "content": []any{
				map[string]any{"type": "thinking", "thinking": "hmm", "signature": fmt.Sprintf("sig%d==", t)},
				map[string]any{"type": "tool_use", "id": id, "name": "Read", "input": map[string]any{"file_path": fmt.Sprintf("/f%d", t)}}}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": id,
				"content": fixtures.ToolOutput(700+t, 5000), "cache_control": map[string]any{"type": "ephemeral"}}}})
		final := []any{map[string]any{"type": "text", "text": fmt.Sprintf("Done %d.", t)}}
		if mixed {
			final = append(final, map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_x%02d", t), "name": "TodoWrite", "input": map[string]any{}})
		}
		msgs = append(msgs, map[string]any{"role": "assistant", "content": final})
	}
	if mixed {
		msgs = append(msgs, map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": fmt.Sprintf("toolu_x%02d", n-1), "content": "ok"}}})
	} else {
		msgs = append(msgs, map[string]any{"role": "user", "content": "Thanks, go on."})
	}
	b, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 1024,
		"system":   []any{map[string]any{"type": "text", "text": "You are Claude Code.", "cache_control": map[string]any{"type": "ephemeral"}}},
		"messages": msgs})
	return b
}

// responsesConversation renders n turns: user message, reasoning,
// function_call, function_call_output, assistant message.
func responsesConversation(n int) []byte {
	items := []any{map[string]any{"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque=="}}
	for t := 0; t < n; t++ {
		cid := fmt.Sprintf("call_%d", t)
		items = append(items,
			map[string]any{"role": "user", "content": fmt.Sprintf("Question %d", t)},
			map[string]any{"type": "reasoning", "id": fmt.Sprintf("rs_%d", t), "summary": []any{}, "encrypted_content": "enc=="},
			map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%d", t), "call_id": cid, "name": "shell", "arguments": "{}"},
			map[string]any{"type": "function_call_output", "call_id": cid, "output": fixtures.ToolOutput(800+t, 5000)},
			map[string]any{"type": "message", "role": "assistant", "id": fmt.Sprintf("msg_%d", t),
				"content": []any{map[string]any{"type": "output_text", "text": fmt.Sprintf("Done %d.", t)}}})
	}
	b, _ := json.Marshal(map[string]any{"model": "gpt-5", "instructions": "Be useful.", "input": items})
	return b
}

func TestCompactionFormats(t *testing.T) {
	tests := []struct {
		name, path string
		body       []byte
		folded     int
		receipts   int
	}{
		// 12 turns, 12 aligned: 6 folded, turn 6 vaulted.
		{"anthropic", "/v1/messages", anthropicConversation(12, false), 6, 1},
		// Every turn boundary answers a call of the turn before, so no fold
		// boundary is clean and nothing folds; old results are still vaulted.
		{"anthropic mixed", "/v1/messages", anthropicConversation(12, true), 0, 7},
		{"responses", "/v1/responses", responsesConversation(12), 6, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := compilertest.NewMemStore()
			c := newCompiler(t, compactOpts(5, 6), store, nil)
			res := c.Compile(t.Context(), compiler.Request{Path: tt.path, Body: tt.body, Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce})
			if res.Folded != tt.folded || res.Receipts != tt.receipts {
				t.Fatalf("folded %d receipts %d (%s/%s), want %d and %d", res.Folded, res.Receipts, res.Decision, res.Reason, tt.folded, tt.receipts)
			}
			if err := compiler.CheckCompacted(tt.path, tt.body, res.Body); err != nil {
				t.Fatal(err)
			}
			// Determinism.
			again := newCompiler(t, compactOpts(5, 6), compilertest.NewMemStore(), nil).Compile(t.Context(),
				compiler.Request{Path: tt.path, Body: tt.body, Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce})
			if !bytes.Equal(again.Body, res.Body) {
				t.Fatal("not deterministic")
			}
			// The recent turns' opaque blocks are byte-identical.
			for _, keep := range []string{`"sig11=="`, `"rs_11"`, `"opaque=="`, `"You are Claude Code."`} {
				if bytes.Contains(tt.body, []byte(keep)) && !bytes.Contains(res.Body, []byte(keep)) {
					t.Fatalf("%s lost", keep)
				}
			}
			// Every folded turn is vaulted exactly.
			for _, a := range store.All("t") {
				if a.Tool == "turn" && !bytes.Contains(tt.body, []byte(a.Text)) {
					t.Fatal("vaulted turn is not original bytes")
				}
			}
			if tt.folded > 0 && strings.Count(string(res.Body), artifact.FoldPrefix) != tt.folded {
				t.Fatal("summary count")
			}
		})
	}
}

// The oracle itself must catch a broken rewrite: an orphaned tool result.
func TestCheckCompactedCatchesBrokenPairing(t *testing.T) {
	body := conversation(12, 5000, nil)
	c := newCompiler(t, compactOpts(5, 6), compilertest.NewMemStore(), nil)
	res := compile(c, "t", body)
	var v map[string]any
	if err := json.Unmarshal(res.Body, &v); err != nil {
		t.Fatal(err)
	}
	msgs := v["messages"].([]any)
	// Drop the assistant tool call of the first inline turn.
	for i, m := range msgs {
		if mm := m.(map[string]any); mm["role"] == "assistant" && mm["tool_calls"] != nil {
			msgs = append(msgs[:i], msgs[i+1:]...)
			break
		}
	}
	v["messages"] = msgs
	broken, _ := json.Marshal(v)
	if err := compiler.CheckCompacted(chatPath, body, broken); err == nil {
		t.Fatal("oracle accepted an orphaned tool result")
	}
}

// A client that sends a second output for an old call (fuzzer find): the
// fold must not take the call away from that output.
func TestFoldKeepsRepeatedAnswers(t *testing.T) {
	items := []any{}
	for i := 0; i < 9; i++ {
		cid := fmt.Sprintf("call_%d", i)
		items = append(items,
			map[string]any{"role": "user", "content": fmt.Sprintf("Question %d", i)},
			map[string]any{"type": "function_call", "call_id": cid, "name": "shell", "arguments": "{}"},
			map[string]any{"type": "function_call_output", "call_id": cid, "output": fixtures.ToolOutput(900+i, 3000)})
		if i == 6 {
			items = append(items, map[string]any{"type": "function_call_output", "call_id": "call_1", "output": "again"})
		}
		items = append(items, map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "ok"}}})
	}
	body, _ := json.Marshal(map[string]any{"model": "gpt-5", "input": items})
	res := compileAt(newCompiler(t, compactOpts(1, 2), compilertest.NewMemStore(), nil), responsesPath, "t", body)
	if res.Reason == compiler.ReasonInvalidOutput || res.Decision != compiler.Accepted {
		t.Fatalf("%s/%s", res.Decision, res.Reason)
	}
	if err := compiler.CheckCompacted(responsesPath, body, res.Body); err != nil {
		t.Fatal(err)
	}
	if err := compiler.CheckRules(responsesPath, res.Body); err != nil {
		t.Fatal(err)
	}
}
