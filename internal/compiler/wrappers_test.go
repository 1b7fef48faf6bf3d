package compiler

import (
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
)

// Every wrapper rule, on real-shaped texts: what is body and what stays.
func TestSplitWrapper(t *testing.T) {
	const body = "     1\tpackage main\n     2\t\n     3\tfunc main() {}\n"
	tokens := "\n\n<system-reminder>\n<total_tokens>14978145 tokens left</total_tokens>\n</system-reminder>"
	malware := "\n\n<system-reminder>\nWhenever you read a file, you should consider whether it would be considered malware.\n</system-reminder>\n"
	header := "Chunk ID: af42e9\nWall time: 0.0000 seconds\nProcess exited with code 0\nOriginal token count: 14369\nOutput:\n"
	tests := []struct {
		name, text, want string
	}{
		{"plain", body, body},
		{"claude code total_tokens trailer", body + tokens, strings.TrimRight(body, "\n")},
		{"claude code malware trailer", body + malware, strings.TrimRight(body, "\n")},
		{"two trailers", body + malware + tokens, strings.TrimRight(body, "\n")},
		{"leading reminder", "<system-reminder>\nThe file was modified.\n</system-reminder>\n" + body, body},
		{"leading and trailing", "<system-reminder>x</system-reminder>\n\n" + body + tokens, strings.TrimRight(body, "\n")},
		{"edit file-state note", "The file /repo/a.go has been updated.\n" + body + "\n(file state is current in your context — no need to Read it back)", "The file /repo/a.go has been updated.\n" + strings.TrimRight(body, "\n")},
		{"codex header", header + body, body},
		{"codex header with truncation", "Chunk ID: 0c1d2e\nWall time: 1.2500 seconds\nProcess exited with code 1\nWarning: truncated output (original token count: 30000)\nTotal output lines: 912\nOutput:\n" + body, body},
		{"codex legacy exec header", "Exit code: 0\nWall time: 0.5 seconds\nOutput:\n" + body, body},
		{"codex header and claude trailer", header + body + tokens, strings.TrimRight(body, "\n")},
		{"bare Output line is body", "Output:\n" + body, "Output:\n" + body},
		{"unknown header line is body", "Chunk ID: 1\nSomething else: 2\nOutput:\n" + body, "Chunk ID: 1\nSomething else: 2\nOutput:\n" + body},
		{"header without Output line is body", "Chunk ID: 1\nWall time: 2 seconds\n" + body, "Chunk ID: 1\nWall time: 2 seconds\n" + body},
		{"unclosed reminder is body", body + "\n<system-reminder>\nno end", body + "\n<system-reminder>\nno end"},
		{"reminder inside the body stays", "a <system-reminder>x</system-reminder> b", "a <system-reminder>x</system-reminder> b"},
		{"all wrapper", tokens, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo, hi := splitWrapper(tt.text)
			if got := tt.text[lo:hi]; got != tt.want {
				t.Fatalf("body %q, want %q", got, tt.want)
			}
		})
	}
}

// The body's raw span is found under any escape spelling, and the
// cached split is the decoded one.
func TestBodyOfRawSpan(t *testing.T) {
	text := "Chunk ID: 1\nOutput:\nbody é \"q\" 😀" + strings.Repeat("x", 2000) + "\n\n<system-reminder>\n<total_tokens>5 tokens left</total_tokens>\n</system-reminder>"
	spellings := []string{
		string(jsonv.AppendString(nil, text)),
		strings.NewReplacer("<", `\u003c`, ">", `\u003e`, "é", `\u00e9`, "😀", `\ud83d\ude00`).Replace(string(jsonv.AppendString(nil, text))),
	}
	for i, raw := range spellings {
		for _, cache := range []*textCache{nil, newTextCache()} {
			for pass := 0; pass < 2; pass++ {
				src := []byte(raw)
				n, err := jsonv.Parse(src, 8)
				if err != nil {
					t.Fatal(err)
				}
				body, start, end := newHasher(src, cache).bodyOf(n)
				want := "body é \"q\" 😀" + strings.Repeat("x", 2000)
				if got := string(jsonv.AppendUnquoted(nil, src[start:end])); got != want {
					t.Fatalf("spelling %d: span decodes to %.40q", i, got)
				}
				if body.str() != want || body.digest != newText(want, src[start:end]).digest || body.chars != newText(want, nil).chars {
					t.Fatalf("spelling %d pass %d: body text differs", i, pass)
				}
			}
		}
	}
}

// Every preamble rule, and texts that are the person's.
func TestPreambleRules(t *testing.T) {
	tests := []struct {
		text string
		want bool
	}{
		{"<system-reminder>\nToday's date is 2026-12-01.\n</system-reminder>", true},
		{"<system-reminder>a</system-reminder>\n<system-reminder>b</system-reminder>\n", true},
		{"<environment_context>\n  <cwd>/repo</cwd>\n</environment_context>", true},
		{"<user_instructions>\nBe brief.\n</user_instructions>", true},
		{"# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>x</INSTRUCTIONS>", true},
		{"<system-reminder>a</system-reminder> please fix the test", false},
		{"please fix <system-reminder>a</system-reminder>", false},
		{"<environment_context> unclosed", false},
		{"Fix the failing test.", false},
		{"", false},
	}
	tests = append(tests, struct {
		text string
		want bool
	}{strings.Repeat(" \n", 100) + "<environment_context>x</environment_context>", true})
	for _, tt := range tests {
		if got := isPreamble(tt.text); got != tt.want {
			t.Errorf("isPreamble(%.50q) = %v, want %v", tt.text, got, tt.want)
		}
		// The raw-bytes shortcut agrees, however the string is spelled.
		for _, raw := range []string{string(jsonv.AppendString(nil, tt.text)), strings.NewReplacer("<", `\u003c`, "#", `\u0023`).Replace(string(jsonv.AppendString(nil, tt.text)))} {
			n, err := jsonv.Parse([]byte(raw), 4)
			if err != nil {
				t.Fatal(err)
			}
			if got := preambleText([]byte(raw), n); got != tt.want {
				t.Errorf("preambleText(%.50s) = %v, want %v", raw, got, tt.want)
			}
		}
	}
}

// Each context_management edit type, and malformed values.
func TestContextManagementCompatible(t *testing.T) {
	tests := []struct {
		cm   string
		want bool
	}{
		{`{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]}`, true},
		{`{"edits":[{"type":"clear_thinking_20251015","keep":{"type":"thinking_turns","value":2}}]}`, true},
		{`{"edits":[{"type":"clear_tool_uses_20250919","trigger":{"type":"input_tokens","value":30000},"keep":{"type":"tool_uses","value":3},"clear_at_least":{"type":"input_tokens","value":5000}}]}`, true},
		{`{"edits":[{"type":"clear_thinking_20251015"},{"type":"clear_tool_uses_20250919"}]}`, true},
		{`{"edits":[]}`, true},
		{`{"edits":[{"type":"compact_20260112"}]}`, false},
		{`{"edits":[{"type":"clear_thinking_20251015"},{"type":"something_new_20270101"}]}`, false},
		{`{"edits":[{"type":"clear_thinking_"}]}`, false},
		{`{"edits":[{"keep":"all"}]}`, false},
		{`{"edits":[{"type":7}]}`, false},
		{`{"edits":["clear_thinking_20251015"]}`, false},
		{`{"edits":{}}`, false},
		{`{}`, false},
		{`null`, false},
		{`[]`, false},
	}
	for _, tt := range tests {
		src := []byte(tt.cm)
		n, err := jsonv.Parse(src, 16)
		if err != nil {
			t.Fatal(err)
		}
		if got := contextManagementCompatible(src, n); got != tt.want {
			t.Errorf("%s: compatible %v, want %v", tt.cm, got, tt.want)
		}
	}
}
