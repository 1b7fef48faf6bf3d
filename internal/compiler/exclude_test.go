package compiler_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// TestExcludeToolsKeepsResultsInline: results of an excluded tool are
// never replaced, in every format and by every mechanism (same-request
// duplicates, leases, compaction's vaulting and folding); the same body
// without the exclusion is rewritten, so the test would notice an
// exclusion that is ignored.
func TestExcludeToolsKeepsResultsInline(t *testing.T) {
	out := fixtures.ToolOutput(1, 9000)
	chat := fixtures.ChatBody("gpt-4o", []fixtures.ChatTurn{
		{Tool: "memory", Args: `{"op":"read"}`, Output: out},
		{Tool: "bash", Args: `{"command":"ls"}`, Output: fixtures.ToolOutput(2, 9000)},
		{Tool: "memory", Args: `{"op":"read"}`, Output: out},
	}, "")
	tests := []struct {
		name, path, tool string
		body             []byte
		opts             compiler.Options
	}{
		{"chat duplicates", chatPath, "memory", chat, compiler.Options{}},
		{"anthropic compaction", "/v1/messages", "Read", anthropicConversation(12, false), compactOpts(5, 6)},
		{"responses compaction", "/v1/responses", "shell", responsesConversation(12), compactOpts(5, 6)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := compiler.Request{Path: tt.path, Body: tt.body, Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce}
			plain := newCompiler(t, tt.opts, compilertest.NewMemStore(), nil).Compile(t.Context(), req)
			if plain.Decision != compiler.Accepted || plain.Receipts+plain.Folded == 0 {
				t.Fatalf("premise: without exclude_tools the body is rewritten; got %s/%s", plain.Decision, plain.Reason)
			}
			opts := tt.opts
			opts.ExcludeTools = []string{"other", tt.tool}
			res := newCompiler(t, opts, compilertest.NewMemStore(), nil).Compile(t.Context(), req)
			if res.Receipts != 0 || res.Folded != 0 || !bytes.Equal(res.Body, tt.body) {
				t.Fatalf("excluded %s results were replaced: %s/%s receipts %d folded %d", tt.tool, res.Decision, res.Reason, res.Receipts, res.Folded)
			}
		})
	}
	// Excluding one tool leaves the others' results to the usual rules.
	opts := compiler.Options{ExcludeTools: []string{"bash"}}
	res := newCompiler(t, opts, compilertest.NewMemStore(), nil).Compile(t.Context(),
		compiler.Request{Path: chatPath, Body: chat, Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce})
	if res.Receipts != 1 {
		t.Fatalf("the memory duplicate should still be receipted: %s/%s receipts %d", res.Decision, res.Reason, res.Receipts)
	}
}

// TestConversationKeyStableFromFirstRequest: a conversation's key is the
// same on its first request as on every later one, whatever the options
// (the first request of a conversation has no tool result, and with
// compaction or the cost model off it used to get no key at all; without
// a system prompt its only unit used to be the key, another unit than the
// later requests'). Two conversations that open with the same
// instructions but different first questions have different keys.
func TestConversationKeyStableFromFirstRequest(t *testing.T) {
	big := fixtures.ToolOutput(3, 9000)
	user := func(s string) map[string]any { return map[string]any{"role": "user", "content": s} }
	step := []map[string]any{
		user("Fix the bug."),
		{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": map[string]any{}}}},
		{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": big}}},
		{"role": "assistant", "content": "Done."},
		user("Thanks."),
	}
	body := func(system bool, n int) []byte {
		m := map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": step[:n]}
		if system {
			m["system"] = "You are helpful."
		}
		b, _ := json.Marshal(m)
		return b
	}
	for _, opts := range []compiler.Options{
		{},
		{Compaction: compiler.Compaction{Enabled: true, MinVaultChars: 4000, CollapseAfterTurns: 6, InlineRecentTurns: 5}},
		{Cost: cost.Config{Off: true}},
	} {
		for _, system := range []bool{false, true} {
			c := newCompiler(t, opts, compilertest.NewMemStore(), nil)
			var first artifact.Digest
			for _, n := range []int{1, 3, 5} {
				res := c.Compile(t.Context(), compiler.Request{Path: "/v1/messages", Body: body(system, n), Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce})
				if res.Conversation == (artifact.Digest{}) {
					t.Fatalf("system=%v request of %d messages: no conversation key (%s)", system, n, res.Reason)
				}
				if n == 1 {
					first = res.Conversation
				} else if res.Conversation != first {
					t.Fatalf("system=%v compaction=%v: request of %d messages has another conversation key than the first request", system, opts.Compaction.Enabled, n)
				}
			}
		}
	}
	// Codex opens every conversation with the same developer messages and
	// session context: the person's first message tells them apart.
	codex := func(q string) []byte {
		b, _ := json.Marshal(map[string]any{"model": "gpt-5", "input": []any{
			map[string]any{"type": "message", "role": "developer", "content": "instructions"},
			map[string]any{"type": "message", "role": "developer", "content": "skills"},
			map[string]any{"type": "message", "role": "user", "content": q},
		}})
		return b
	}
	c := newCompiler(t, compiler.Options{}, compilertest.NewMemStore(), nil)
	a := c.Compile(t.Context(), compiler.Request{Path: "/v1/responses", Body: codex("first task"), Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce})
	b := c.Compile(t.Context(), compiler.Request{Path: "/v1/responses", Body: codex("another task"), Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce})
	if a.Conversation == (artifact.Digest{}) || a.Conversation == b.Conversation {
		t.Fatal("two conversations with different first questions share a conversation key")
	}
}

// TestHoldoutCallback: the request's mode is what Request.Holdout says once
// the conversation key is known: a control conversation compiles in
// shadow (the original goes out, nothing is stored), and ModeOff stops the
// compile (passthrough=holdout).
func TestHoldoutCallback(t *testing.T) {
	body := fixtures.ChatBody("gpt-4o", []fixtures.ChatTurn{
		{Tool: "bash", Args: `{}`, Output: fixtures.ToolOutput(1, 9000)},
		{Tool: "bash", Args: `{}`, Output: fixtures.ToolOutput(1, 9000)},
	}, "")
	for _, tt := range []struct {
		mode     compiler.Mode
		decision compiler.Decision
		reason   compiler.Reason
	}{
		{compiler.ModeEnforce, compiler.Accepted, ""},
		{compiler.ModeShadow, compiler.Shadow, ""},
		{compiler.ModeOff, compiler.Passthrough, compiler.ReasonHoldout},
	} {
		store := compilertest.NewMemStore()
		var asked artifact.Digest
		res := newCompiler(t, compiler.Options{}, store, nil).Compile(t.Context(), compiler.Request{Path: chatPath, Body: body,
			Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce,
			Holdout: func(c artifact.Digest) compiler.Mode { asked = c; return tt.mode }})
		if res.Decision != tt.decision || res.Reason != tt.reason || asked != res.Conversation || asked == (artifact.Digest{}) {
			t.Fatalf("mode %s: %s/%s", tt.mode, res.Decision, res.Reason)
		}
		if tt.mode != compiler.ModeEnforce && (!bytes.Equal(res.Body, body) || store.Len() != 0) {
			t.Fatalf("mode %s: the original must go out and nothing be stored (%d stored)", tt.mode, store.Len())
		}
	}
}
