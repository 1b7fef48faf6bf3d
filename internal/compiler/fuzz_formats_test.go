package compiler_test

import (
	"bytes"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// fuzzFormat checks, whatever the body: no panic; the input is never
// modified; a pass-through is the original bytes; an accepted rewrite is
// strictly smaller, valid JSON, differs from the original only inside
// replaced values (assertSpliced), passes the validity check and has its
// receipts only in tool-result slots.
func fuzzFormat(t *testing.T, path string, body []byte) {
	store := compilertest.NewMemStore()
	c, err := compiler.New(compiler.Options{MinArtifactChars: 16, InlineLeases: 1}, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	orig := bytes.Clone(body)
	for i := 0; i < 2; i++ { // the second pass sees the first as its history
		res := compileAt(c, path, "t", body)
		if res.Reason == compiler.ReasonPanic || res.Reason == compiler.ReasonInternal || res.Reason == compiler.ReasonInvalidOutput {
			t.Fatalf("compiler %s", res.Reason)
		}
		if !bytes.Equal(body, orig) {
			t.Fatalf("input modified")
		}
		assertValidRewrite(t, path, body, res)
	}
}

func FuzzCompileResponses(f *testing.F) {
	o := fixtures.ToolOutput(1, 300)
	turns := []fixtures.ChatTurn{{Tool: "shell", Args: `{"cmd":"ls"}`, Output: o}, {Tool: "shell", Output: o}}
	f.Add(fixtures.ResponsesBody("gpt-5", turns, "hi", fixtures.ResponsesOptions{}))
	f.Add(fixtures.ResponsesBody("gpt-5", turns, "", fixtures.ResponsesOptions{Reasoning: true, PartsOutput: true, PreviousResponseID: "resp_1"}))
	f.Add([]byte(`{"input":[{"type":"reasoning","id":"rs","encrypted_content":"abc"},{"type":"function_call","call_id":"c:1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c:1","output":[{"type":"input_text","text":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}]},{"type":"custom_tool_call_output","call_id":"c:1","output":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"},{"type":"compaction","encrypted_content":"x"}]}`))
	f.Add([]byte(`{"input":"hello"}`))
	f.Add(codexBodySized([]int{1, 2, 1}, 100))
	f.Add([]byte(`{"input":[{"type":"function_call_output","call_id":"a","output":"\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"},{"type":"function_call_output","call_id":"a","output":"éééééééééééééééééé"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) { fuzzFormat(t, responsesPath, body) })
}

func FuzzCompileAnthropic(f *testing.F) {
	o := fixtures.ToolOutput(1, 300)
	turns := []fixtures.ChatTurn{{Tool: "Read", Args: `{"p":1}`, Output: o}, {Tool: "Read", Output: o}}
	f.Add(fixtures.AnthropicBody("claude", turns, "hi", fixtures.AnthropicOptions{}))
	f.Add(fixtures.AnthropicBody("claude", turns, "", fixtures.AnthropicOptions{System: true, Thinking: true, PartsOutput: true, CacheLast: true}))
	f.Add([]byte(`{"system":"s","messages":[{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"tool_use","id":"a.b:1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a.b:1","is_error":true,"content":[{"type":"text","text":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}],"cache_control":{"type":"ephemeral"}},{"type":"tool_result","tool_use_id":"a.b:1","content":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"},{"type":"text","text":"go"}]}]}`))
	f.Add([]byte(`{"context_management":{},"messages":[]}`))
	f.Add(claudeCodeBodySized([]int{1, 2, 1}, ccContextManagement, 100))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"},{"type":"tool_result","tool_use_id":"x","content":"éééééééééééééééééé"}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) { fuzzFormat(t, messagesPath, body) })
}
