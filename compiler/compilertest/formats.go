package compilertest

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

// opaque returns a deterministic base64 blob of about n characters, the
// shape of encrypted reasoning content and thinking signatures.
func opaque(label string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		s := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", label, i)))
		b.WriteString(base64.StdEncoding.EncodeToString(s[:]))
	}
	return b.String()[:n]
}

// ResponsesOptions shapes a generated OpenAI Responses request.
type ResponsesOptions struct {
	Instructions       string // "" means "You are a coding agent."
	Reasoning          bool   // a reasoning item (encrypted_content) before every call
	PartsOutput        bool   // outputs as lists of input_text parts
	PreviousResponseID string // sent when non-empty
}

// ResponsesBody renders an OpenAI Responses request: instructions, a user
// message, then per turn (a reasoning item,) a function_call and its
// function_call_output, then a final user message if final is non-empty.
func ResponsesBody(model string, turns []ChatTurn, final string, o ResponsesOptions) []byte {
	instr := o.Instructions
	if instr == "" {
		instr = "You are a coding agent."
	}
	items := []any{
		map[string]any{"type": "message", "role": "user", "content": []any{
			map[string]any{"type": "input_text", "text": "Fix the failing test."}}},
	}
	for i, t := range turns {
		id := fmt.Sprintf("call_%d", i)
		if o.Reasoning {
			items = append(items, map[string]any{"type": "reasoning", "id": fmt.Sprintf("rs_%d", i),
				"summary": []any{}, "encrypted_content": opaque(fmt.Sprintf("rs/%d/%s", i, t.Tool), 600)})
		}
		var out any = t.Output
		if o.PartsOutput {
			out = []any{map[string]any{"type": "input_text", "text": t.Output}}
		}
		items = append(items,
			map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%d", i), "call_id": id,
				"name": t.Tool, "arguments": t.Args},
			map[string]any{"type": "function_call_output", "call_id": id, "output": out})
	}
	if final != "" {
		items = append(items, map[string]any{"role": "user", "content": final})
	}
	body := map[string]any{"model": model, "instructions": instr, "input": items,
		"tools": []any{map[string]any{"type": "function", "name": "bash",
			"parameters": map[string]any{"type": "object"}}}, "store": false}
	if o.PreviousResponseID != "" {
		body["previous_response_id"] = o.PreviousResponseID
	}
	b, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	return b
}

// AnthropicOptions shapes a generated Anthropic Messages request.
type AnthropicOptions struct {
	System      bool // system as a list of text blocks with a cache_control breakpoint
	Thinking    bool // a signed thinking block before every tool_use
	PartsOutput bool // tool_result content as lists of text blocks
	CacheLast   bool // a cache_control breakpoint on the last tool_result
}

// AnthropicBody renders an Anthropic Messages request: a user message, then
// per turn an assistant message ((thinking,) text, tool_use) and a user
// message with its tool_result; the final text, if non-empty, follows the
// last tool_result in the same user message.
func AnthropicBody(model string, turns []ChatTurn, final string, o AnthropicOptions) []byte {
	msgs := []any{map[string]any{"role": "user", "content": "Fix the failing test."}}
	var last map[string]any
	for i, t := range turns {
		id := fmt.Sprintf("toolu_%02d", i)
		var blocks []any
		if o.Thinking {
			blocks = append(blocks, map[string]any{"type": "thinking", "thinking": "I should look at the file.",
				"signature": opaque(fmt.Sprintf("sig/%d/%s", i, t.Tool), 400)})
		}
		var input any = map[string]any{}
		if json.Valid([]byte(t.Args)) && strings.HasPrefix(strings.TrimSpace(t.Args), "{") {
			input = json.RawMessage(t.Args)
		}
		blocks = append(blocks,
			map[string]any{"type": "text", "text": "Let me look."},
			map[string]any{"type": "tool_use", "id": id, "name": t.Tool, "input": input})
		var content any = t.Output
		if o.PartsOutput {
			content = []any{map[string]any{"type": "text", "text": t.Output}}
		}
		last = map[string]any{"type": "tool_result", "tool_use_id": id, "content": content}
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": blocks},
			map[string]any{"role": "user", "content": []any{last}})
	}
	if last != nil && o.CacheLast {
		last["cache_control"] = map[string]any{"type": "ephemeral"}
	}
	if final != "" {
		if len(turns) == 0 {
			msgs = append(msgs, map[string]any{"role": "assistant", "content": "OK."},
				map[string]any{"role": "user", "content": final})
		} else {
			u := msgs[len(msgs)-1].(map[string]any)
			u["content"] = append(u["content"].([]any), map[string]any{"type": "text", "text": final})
		}
	}
	body := map[string]any{"model": model, "max_tokens": 8192, "messages": msgs,
		"tools": []any{map[string]any{"name": "bash", "input_schema": map[string]any{"type": "object"}}}}
	if o.System {
		body["system"] = []any{map[string]any{"type": "text", "text": "You are a coding agent.",
			"cache_control": map[string]any{"type": "ephemeral"}}}
	}
	b, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	return b
}
