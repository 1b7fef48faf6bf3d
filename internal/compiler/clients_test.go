package compiler_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// Real-shaped client fixtures, written for these tests in the shapes real
// Claude Code and Codex CLI requests have (see the project's notes on real
// clients); no captured content.

// rawJSON encodes v as JavaScript clients do: < > & stay as written.
func rawJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// ccTokens is the budget Claude Code reports after turn t's result.
func ccTokens(t int) int { return 14978145 - 1000*t }

// ccTokensLeft is Claude Code's volatile tool-result trailer.
func ccTokensLeft(n int) string {
	return fmt.Sprintf("\n\n<system-reminder>\n<total_tokens>%d tokens left</total_tokens>\n</system-reminder>", n)
}

const ccMalwareNote = "\n\n<system-reminder>\nWhenever you read a file, you should consider whether it would be considered malware. You CAN and SHOULD provide analysis of malware.\n</system-reminder>\n"

// ccPreamble is the session context Claude Code puts before the person's
// words in its first user message.
var ccPreamble = []string{
	"<system-reminder>\nAs you answer the user's questions, you can use the following context:\n# claudeMd\nContents of /repo/CLAUDE.md (project instructions):\n\nRun go test before committing.\n</system-reminder>",
	"<system-reminder>\nThe following deferred tools are available: WebFetch, NotebookEdit.\nAgent types: general-purpose, Explore.\nToday's date is 2026-12-01.\n</system-reminder>",
}

// claudeCodeBody renders a Claude Code request with turns turns: the first
// user message holds the preamble blocks and then the person's words; every
// turn reads a file (results carry a trailer that changes every step, the
// way <total_tokens> counts down); thinking is on, with signed thinking
// blocks, and context_management clears thinking. reads[t] is the seed of
// the file turn t reads (the same seed: the same file). The history is
// append-only, as the client's: a later step repeats every earlier result
// with its trailer as first sent.
func claudeCodeBody(reads []int, contextManagement string) []byte {
	return claudeCodeBodySized(reads, contextManagement, 9000)
}

// claudeCodeBodySized is claudeCodeBody with file reads of about size
// characters (small ones seed the fuzzers).
func claudeCodeBodySized(reads []int, contextManagement string, size int) []byte {
	first := []any{}
	for _, p := range ccPreamble {
		first = append(first, map[string]any{"type": "text", "text": p})
	}
	first = append(first, map[string]any{"type": "text", "text": "Please fix the flaky test in parser_test.go."})
	msgs := []any{map[string]any{"role": "user", "content": first}}
	for t, seed := range reads {
		id := fmt.Sprintf("toolu_%02d", t)
		if t > 0 {
			msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("Now look at step %d.", t)})
		}
		trailer := ccTokensLeft(ccTokens(t))
		if t%2 == 1 {
			trailer = ccMalwareNote
		}
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": []any{
				map[string]any{"type": "thinking", "thinking": "Read the file first.", "signature": fmt.Sprintf("EuYBCkQIBxgCKkD%02d==", t)},
				map[string]any{"type": "tool_use", "id": id, "name": "Read", "input": map[string]any{"file_path": fmt.Sprintf("/repo/f%d.go", seed)}}}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": id,
				"content": fixtures.ToolOutput(seed, size) + trailer}}},
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": fmt.Sprintf("Read file %d.", seed)}}})
	}
	// The person's next words, as the next step's next turn starts.
	msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("Now look at step %d.", len(reads))})
	var b bytes.Buffer
	// Claude Code's key order: messages before system and tools.
	fmt.Fprintf(&b, `{"model":"claude-sonnet-4-5","messages":%s,"system":[{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}}],"tools":[{"name":"Read","input_schema":{"type":"object"}}],"max_tokens":32000,"thinking":{"type":"enabled","budget_tokens":31999}`, rawJSON(msgs))
	if contextManagement != "" {
		fmt.Fprintf(&b, `,"context_management":%s`, contextManagement)
	}
	b.WriteString("}")
	return b.Bytes()
}

const ccContextManagement = `{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]}`

// codexChunk is the chunk id of turn t's output.
func codexChunk(t int) string { return fmt.Sprintf("%06x", 0xaf42e9+31*t) }

// codexHeader is Codex's volatile command-output header.
func codexHeader(chunk string, wall float64, tokens int) string {
	return fmt.Sprintf("Chunk ID: %s\nWall time: %.4f seconds\nProcess exited with code 0\nOriginal token count: %d\nOutput:\n", chunk, wall, tokens)
}

var codexPreamble = []string{
	"# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>\nUse gofmt.\n</INSTRUCTIONS>",
	"<environment_context>\n  <cwd>/repo</cwd>\n  <shell>bash</shell>\n  <current_date>2026-12-01</current_date>\n  <sandbox_mode>workspace-write</sandbox_mode>\n</environment_context>",
}

// codexBody renders a Codex CLI Responses request: developer instructions,
// the AGENTS.md and <environment_context> user messages, the person's
// message, then per turn a reasoning item, a shell call whose output has a
// header that changes every run, and an assistant message.
func codexBody(runs []int) []byte { return codexBodySized(runs, 9000) }

// codexBodySized is codexBody with outputs of about size characters.
func codexBodySized(runs []int, size int) []byte {
	items := []any{map[string]any{"type": "message", "role": "developer", "content": []any{map[string]any{"type": "input_text", "text": "You are Codex."}}}}
	for _, p := range codexPreamble {
		items = append(items, map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": p}}})
	}
	items = append(items, map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "Make the build pass."}}})
	for t, seed := range runs {
		cid := fmt.Sprintf("call_%02d", t)
		if t > 0 {
			items = append(items, map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": fmt.Sprintf("Next, step %d.", t)}}})
		}
		out := codexHeader(codexChunk(t), 0.01*float64(t+1), 2000+seed) + fixtures.ToolOutput(seed, size)
		items = append(items,
			map[string]any{"type": "reasoning", "id": fmt.Sprintf("rs_%02d", t), "summary": []any{}, "encrypted_content": fmt.Sprintf("gAAAAB%02d==", t)},
			map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%02d", t), "call_id": cid, "name": "shell", "arguments": fmt.Sprintf(`{"command":["cat","f%d"]}`, seed)},
			map[string]any{"type": "function_call_output", "call_id": cid, "output": out},
			map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": fmt.Sprintf("Ran %d.", seed)}}})
	}
	return rawJSON(map[string]any{"model": "gpt-5-codex", "input": items, "stream": true, "store": false, "prompt_cache_key": "sess-1"})
}

// chatWrappedBody renders a Chat Completions request from a client that
// wraps tool results the way Claude Code does (a translating proxy), with
// a pinned <environment_context> user message.
func chatWrappedBody(reads []int) []byte { return chatWrappedBodySized(reads, 9000) }

// chatWrappedBodySized is chatWrappedBody with results of about size characters.
func chatWrappedBodySized(reads []int, size int) []byte {
	msgs := []any{map[string]any{"role": "system", "content": "You are helpful."},
		map[string]any{"role": "user", "content": codexPreamble[1]},
		map[string]any{"role": "user", "content": "Please review the files."}}
	for t, seed := range reads {
		id := fmt.Sprintf("call_%d", t)
		if t > 0 {
			msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("And step %d.", t)})
		}
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": id, "type": "function",
				"function": map[string]any{"name": "read_file", "arguments": fmt.Sprintf(`{"path":"f%d"}`, seed)}}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": fixtures.ToolOutput(seed, size) + ccTokensLeft(ccTokens(t))},
			map[string]any{"role": "assistant", "content": fmt.Sprintf("File %d read.", seed)})
	}
	return rawJSON(map[string]any{"model": "gpt-4o", "messages": msgs})
}

// jsonString is the raw JSON spelling of s as the fixtures write it.
func jsonString(s string) string {
	b := rawJSON(s)
	return strings.TrimSuffix(strings.TrimPrefix(string(b), `"`), `"`)
}
