package compilertest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// ToolOutput returns deterministic, realistic-looking tool output of about n
// characters (a listing of source lines), different for each seed.
func ToolOutput(seed, n int) string {
	r := rand.New(rand.NewPCG(uint64(seed), 0x70b))
	words := []string{"def", "return", "self", "import", "value", "if", "else", "for", "in", "range",
		"print", "None", "True", "config", "request", "=", "(", ")", ":", "#", "héllo", "日本", "✓"}
	var b strings.Builder
	line := 1
	for b.Len() < n {
		fmt.Fprintf(&b, "%6d\t", line)
		for k := 4 + r.IntN(8); k > 0; k-- {
			b.WriteString(words[r.IntN(len(words))])
			b.WriteByte(' ')
		}
		b.WriteString("\"q\"\n")
		line++
	}
	return b.String()
}

// ChatTurn is one tool round of a generated chat conversation.
type ChatTurn struct {
	Tool   string
	Args   string
	Output string
}

// ChatBody renders an OpenAI Chat Completions request: system, user, then
// per turn an assistant tool call and its tool result, then a final user
// message if final is non-empty.
func ChatBody(model string, turns []ChatTurn, final string) []byte {
	msgs := []any{
		map[string]any{"role": "system", "content": "You are a coding agent."},
		map[string]any{"role": "user", "content": "Fix the failing test."},
	}
	for i, t := range turns {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
				"id": id, "type": "function", "function": map[string]any{"name": t.Tool, "arguments": t.Args}}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": t.Output})
	}
	if final != "" {
		msgs = append(msgs, map[string]any{"role": "user", "content": final})
	}
	b, err := json.Marshal(map[string]any{"model": model, "messages": msgs, "temperature": 0})
	if err != nil {
		panic(err)
	}
	return b
}

// Turns returns n turns whose outputs are ToolOutput(seed+i, size).
func Turns(seed, n, size int) []ChatTurn {
	out := make([]ChatTurn, n)
	for i := range out {
		out[i] = ChatTurn{Tool: "bash", Args: fmt.Sprintf(`{"command":"cat file%d.py"}`, seed+i), Output: ToolOutput(seed+i, size)}
	}
	return out
}
