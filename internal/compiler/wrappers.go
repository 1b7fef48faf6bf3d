package compiler

import (
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
)

// Client wrappers and the session preamble.
//
// Agent clients add their own volatile text around a tool's output (Claude
// Code's <system-reminder> trailers, Codex's "Chunk ID: …" header) and their
// own session context to the conversation (Claude Code's <system-reminder>
// text blocks, Codex's <environment_context> message). Both are the client's
// instructions to the model, not the tool's or the person's content: a
// wrapper stays inline byte for byte around the receipt that replaces the
// stable body, and a preamble part is never folded nor quoted as the
// person's words. The rules are small tables by client family; every rule
// applies to every format (the shapes are unmistakable, and one table keeps
// a tool result's identity independent of the path it came by).

// wrapperRule recognises one kind of volatile part at one end of a tool
// result's text. match returns how many bytes of s, at its start (lead) or
// end (!lead), the part spans, or 0.
type wrapperRule struct {
	family string
	name   string
	lead   bool
	match  func(s string) int
}

// wrapperRules is the table of tool-result wrappers.
var wrapperRules = []wrapperRule{
	// Claude Code appends "\n\n<system-reminder>\n<total_tokens>…</total_tokens>\n</system-reminder>"
	// (and other reminders) to tool results; some come first.
	{family: "claude_code", name: "system_reminder", lead: true, match: leadingTag(reminderOpen, reminderClose)},
	{family: "claude_code", name: "system_reminder", lead: false, match: trailingTag(reminderOpen, reminderClose)},
	// After an Edit, Claude Code may end the result with a note that the
	// model's file state is current.
	{family: "claude_code", name: "file_state_note", lead: false, match: trailingLine(fileStateNote, ")")},
	// Codex prefixes command output with a header of volatile lines ending
	// in "Output:".
	{family: "codex", name: "exec_header", lead: true, match: codexHeader},
}

const (
	reminderOpen  = "<system-reminder>"
	reminderClose = "</system-reminder>"
	fileStateNote = "(file state is current in your context"
)

// splitWrapper returns the stable body of a tool result's text as the byte
// range [lo, hi) of s: s with every leading and trailing wrapper part, and
// the whitespace that separates them from the body, taken off. A text
// without wrappers is all body.
func splitWrapper(s string) (lo, hi int) {
	lo, hi = 0, len(s)
	for changed := true; changed; {
		changed = false
		for _, r := range wrapperRules {
			body := s[lo:hi]
			if n := r.match(body); n > 0 && n <= len(body) {
				if r.lead {
					lo += n
				} else {
					hi -= n
				}
				changed = true
			}
		}
	}
	return lo, hi
}

// leadingTag matches whitespace, one open…close block and the line breaks
// after it at the start of s (the body's own indentation stays body).
func leadingTag(open, close string) func(string) int {
	return func(s string) int {
		t := strings.TrimLeft(s, " \t\r\n")
		if !strings.HasPrefix(t, open) {
			return 0
		}
		end := strings.Index(t, close)
		if end < 0 {
			return 0
		}
		rest := t[end+len(close):]
		return len(s) - len(strings.TrimLeft(rest, "\r\n"))
	}
}

// trailingTag matches the line breaks before one open…close block, the
// block and the whitespace after it at the end of s.
func trailingTag(open, close string) func(string) int {
	return func(s string) int {
		t := strings.TrimRight(s, " \t\r\n")
		if !strings.HasSuffix(t, close) {
			return 0
		}
		start := strings.LastIndex(t, open)
		if start < 0 {
			return 0
		}
		return len(s) - len(strings.TrimRight(t[:start], "\r\n"))
	}
}

// trailingLine matches a last line that starts with prefix and ends with
// suffix, with the whitespace around it.
func trailingLine(prefix, suffix string) func(string) int {
	return func(s string) int {
		t := strings.TrimRight(s, " \t\r\n")
		i := strings.LastIndexByte(t, '\n') + 1
		line := t[i:]
		if !strings.HasPrefix(line, prefix) || !strings.HasSuffix(line, suffix) {
			return 0
		}
		return len(s) - len(strings.TrimRight(t[:i], "\r\n"))
	}
}

// codexHeaderLines start the lines of Codex's command-output header.
var codexHeaderLines = []string{
	"Chunk ID: ", "Wall time: ", "Process exited with code ", "Process running with session ID ",
	"Original token count: ", "Total output lines: ", "Exit code: ", "Warning: ",
}

// codexHeader matches a run of header lines ending with the "Output:" line.
func codexHeader(s string) int {
	pos := 0
	for lines := 0; lines < 16; lines++ {
		nl := strings.IndexByte(s[pos:], '\n')
		if nl < 0 {
			return 0
		}
		line := strings.TrimSuffix(s[pos:pos+nl], "\r")
		if line == "Output:" {
			if lines == 0 {
				return 0 // a bare "Output:" line is not a header
			}
			return pos + nl + 1
		}
		known := false
		for _, p := range codexHeaderLines {
			if strings.HasPrefix(line, p) {
				known = true
				break
			}
		}
		if !known {
			return 0
		}
		pos += nl + 1
	}
	return 0
}

// preambleRule recognises client-injected session context: a text part (or
// a whole message's text) that is the client's, not the person's.
type preambleRule struct {
	family string
	name   string
	start  string // every match starts with this, after whitespace
	match  func(s string) bool
}

// preambleRules is the table of session-preamble texts.
var preambleRules = []preambleRule{
	// Claude Code's session context (environment, model, tools, skills,
	// CLAUDE.md contents, date) comes as <system-reminder> text blocks.
	{family: "claude_code", name: "system_reminder", start: reminderOpen, match: wholeTag(reminderOpen, reminderClose)},
	// Codex sends its environment and the user's instructions (AGENTS.md)
	// as user messages of their own.
	{family: "codex", name: "environment_context", start: "<environment_context>", match: wholeTag("<environment_context>", "</environment_context>")},
	{family: "codex", name: "user_instructions", start: "<user_instructions>", match: wholeTag("<user_instructions>", "</user_instructions>")},
	{family: "codex", name: "agents_md", start: agentsMD, match: func(s string) bool {
		return strings.HasPrefix(strings.TrimLeft(s, " \t\r\n"), agentsMD)
	}},
	// Gemini CLI sends its environment (date, platform, directory tree,
	// memory) as the first user content.
	{family: "gemini_cli", name: "session_context", start: "<session_context>", match: wholeTag("<session_context>", "</session_context>")},
}

// mayStartTag is a cheap test on raw string content: false when the first
// character after whitespace cannot start a preamble ('<', '#', or an
// escape that may spell one); ws is the raw length of that whitespace.
func mayStartTag(raw []byte) (ws int, ok bool) {
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; c {
		case ' ':
		case '\\':
			if i+1 < len(raw) && (raw[i+1] == 'n' || raw[i+1] == 't' || raw[i+1] == 'r') {
				i++
				continue
			}
			return i, true
		default:
			return i, c == '<' || c == '#'
		}
	}
	return 0, false
}

// wholeTag matches a text that is one or more open…close blocks and
// nothing else but whitespace.
func wholeTag(open, close string) func(string) bool {
	lead := leadingTag(open, close)
	return func(s string) bool {
		if strings.TrimSpace(s) == "" {
			return false
		}
		for strings.TrimSpace(s) != "" {
			n := lead(s)
			if n == 0 {
				return false
			}
			s = s[n:]
		}
		return true
	}
}

const agentsMD = "# AGENTS.md instructions for "

// isPreamble reports whether a text is client-injected session context.
func isPreamble(s string) bool {
	for _, r := range preambleRules {
		if r.match(s) {
			return true
		}
	}
	return false
}

// preambleText reports whether a string node is session context. Only a
// string whose start names a rule is decoded in full, so the person's own
// long texts cost the decoding of their first bytes.
func preambleText(src []byte, n *jsonv.Node) bool {
	if !n.Is(jsonv.String) {
		return false
	}
	ws, ok := mayStartTag(src[n.Start+1 : n.End-1])
	if !ok {
		return false
	}
	start := strings.TrimLeft(n.TextPrefix(src, ws+64), " \t\r\n")
	for _, r := range preambleRules {
		if strings.HasPrefix(start, r.start) {
			s, _ := n.Text(src)
			return isPreamble(s)
		}
	}
	return false
}
