package compiler_test

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// The same file read twice by a real client never has the same text: the
// wrapper differs. Duplicates are found by the stable body, the receipt
// replaces only the body, the wrapper stays byte for byte, and the vault
// holds exactly the body.
func TestClientWrappersStayInline(t *testing.T) {
	tests := []struct {
		name, path string
		body       []byte
		wrappers   []string // raw JSON spellings that must survive in the rewrite
		file       string   // the stable body of the duplicated result
	}{
		{"claude code", messagesPath, claudeCodeBody([]int{7, 8, 7}, ccContextManagement),
			[]string{`\n` + jsonString(ccTokensLeft(ccTokens(0))), `\n` + jsonString(ccTokensLeft(ccTokens(2)))}, fixtures.ToolOutput(7, 9000)},
		{"codex", responsesPath, codexBody([]int{7, 8, 7}),
			[]string{jsonString(codexHeader(codexChunk(0), 0.01, 2007)), jsonString(codexHeader(codexChunk(2), 0.03, 2007))}, fixtures.ToolOutput(7, 9000)},
		{"chat with claude code trailers", chatPath, chatWrappedBody([]int{7, 8, 7}),
			[]string{`\n` + jsonString(ccTokensLeft(ccTokens(0))), `\n` + jsonString(ccTokensLeft(ccTokens(2)))}, fixtures.ToolOutput(7, 9000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := compilertest.NewMemStore()
			c := newCompiler(t, compiler.Options{InlineLeases: 1}, store, nil)
			res := compileAt(c, tt.path, "t", tt.body)
			if res.Decision != compiler.Accepted || res.Receipts != 1 {
				t.Fatalf("%s/%s with %d receipts, want accepted with 1", res.Decision, res.Reason, res.Receipts)
			}
			assertValidRewrite(t, tt.path, tt.body, res)
			for _, w := range tt.wrappers {
				if !bytes.Contains(res.Body, []byte(w)) {
					t.Fatalf("wrapper %.60q lost", w)
				}
			}
			// The receipt sits where the older body was, right before its wrapper.
			if !bytes.Contains(res.Body, []byte("…]"+tt.wrappers[0])) && !bytes.Contains(res.Body, []byte(tt.wrappers[0]+artifact.ReceiptPrefix)) {
				t.Fatal("receipt is not next to its wrapper")
			}
			file := strings.TrimRight(tt.file, "\n")
			if strings.HasSuffix(tt.wrappers[0], `Output:\n`) {
				file = tt.file // a header: the body keeps its own trailing line break
			}
			d := storedDigest(store, "t", file)
			art, ok, _ := store.Get(t.Context(), "t", d)
			if !ok || art.Text != file || store.Len() != 1 {
				t.Fatalf("vault does not hold exactly the stable body (found %v, %d artifacts)", ok, store.Len())
			}
			if strings.Contains(art.Text, "system-reminder") || strings.Contains(art.Text, "Chunk ID") || strings.Contains(string(art.Raw), "system-reminder") {
				t.Fatal("a wrapper was vaulted")
			}
			// Determinism: a fresh compiler gives the same bytes.
			again := compileAt(newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil), tt.path, "t", tt.body)
			if !bytes.Equal(again.Body, res.Body) {
				t.Fatal("not deterministic")
			}
		})
	}
}

// Leases follow the stable body across requests: the next step of the
// session reads file 1 again (a new trailer or header), and that result
// goes out as a receipt too, since the model has seen its body.
func TestClientWrapperLeases(t *testing.T) {
	tests := []struct {
		name, path  string
		first, next []byte
	}{
		{"claude code", messagesPath, claudeCodeBody([]int{1, 2}, ccContextManagement), claudeCodeBody([]int{1, 2, 3, 1}, ccContextManagement)},
		{"codex", responsesPath, codexBody([]int{1, 2}), codexBody([]int{1, 2, 3, 1})},
		{"chat", chatPath, chatWrappedBody([]int{1, 2}), chatWrappedBody([]int{1, 2, 3, 1})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
			if first := compileAt(c, tt.path, "t", tt.first); first.Receipts != 0 {
				t.Fatalf("first step: %d receipts", first.Receipts)
			}
			res := compileAt(c, tt.path, "t", tt.next)
			// Files 1 (twice) and 2 were seen; file 3 is new.
			if res.Decision != compiler.Accepted || res.Receipts != 3 {
				t.Fatalf("second step: %s/%s with %d receipts, want 3", res.Decision, res.Reason, res.Receipts)
			}
			assertValidRewrite(t, tt.path, tt.next, res)
		})
	}
}

// Claude Code's defaults (thinking on, clear_thinking edit) compile; the
// context_management field and every signed thinking block go out byte for
// byte; the checker holds with thinking blocks in the history, folded or not.
func TestClaudeCodeDefaultsCompile(t *testing.T) {
	for _, cm := range []string{
		ccContextManagement,
		`{"edits":[{"type":"clear_tool_uses_20250919","keep":{"type":"tool_uses","value":2}}]}`,
		`{"edits":[{"type":"clear_thinking_20251015","keep":"all"},{"type":"clear_tool_uses_20250919"}]}`,
	} {
		body := claudeCodeBody([]int{3, 3, 4, 5, 6, 7, 8, 9, 10}, cm)
		for _, opts := range []compiler.Options{{InlineLeases: 1}, compactOpts(2, 4)} {
			res := compileAt(newCompiler(t, opts, compilertest.NewMemStore(), nil), messagesPath, "t", body)
			if res.Decision != compiler.Accepted {
				t.Fatalf("%s: %s/%s", cm, res.Decision, res.Reason)
			}
			if err := compiler.CheckCompacted(messagesPath, body, res.Body); err != nil {
				t.Fatalf("%s: %v", cm, err)
			}
			mustContainOnce(t, res.Body, `"context_management":`+cm+`}`)
			mustContainOnce(t, res.Body, `"thinking":{"type":"enabled","budget_tokens":31999}`)
			// The recent turns' signed thinking blocks are untouched.
			mustContainOnce(t, res.Body, `"signature":"EuYBCkQIBxgCKkD08=="`)
		}
	}
	// An edit whose effect is not known stands the gateway down.
	body := claudeCodeBody([]int{3, 3}, `{"edits":[{"type":"compact_20260112"}]}`)
	res := compileAt(newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil), messagesPath, "t", body)
	if res.Reason != compiler.ReasonProviderContextManagement || !bytes.Equal(res.Body, body) {
		t.Fatalf("unknown edit: %s/%s", res.Decision, res.Reason)
	}
}

// The session preamble is never folded and never quoted as the person's
// words, in every format.
func TestPreamblePinned(t *testing.T) {
	tests := []struct {
		name, path string
		body       []byte
		preamble   []string // raw JSON spellings that must survive
		person     string   // the first turn's summary quotes these words
	}{
		{"claude code", messagesPath, claudeCodeBody([]int{1, 2, 3, 4, 5, 6, 7, 8, 9}, ccContextManagement),
			[]string{`{"text":` + string(rawJSON(ccPreamble[0])) + `,"type":"text"}`, `{"text":` + string(rawJSON(ccPreamble[1])) + `,"type":"text"}`},
			"Please fix the flaky test in parser_test.go."},
		{"codex", responsesPath, codexBody([]int{1, 2, 3, 4, 5, 6, 7, 8, 9}),
			[]string{string(rawJSON(codexPreamble[0])), string(rawJSON(codexPreamble[1])), `"role":"developer"`},
			"Make the build pass."},
		{"chat", chatPath, chatWrappedBody([]int{1, 2, 3, 4, 5, 6, 7, 8, 9}),
			[]string{`{"content":` + string(rawJSON(codexPreamble[1])) + `,"role":"user"}`},
			"Please review the files."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCompiler(t, compactOpts(2, 4), compilertest.NewMemStore(), nil)
			res := compileAt(c, tt.path, "t", tt.body)
			if res.Decision != compiler.Accepted || res.Folded == 0 {
				t.Fatalf("%s/%s, %d folded", res.Decision, res.Reason, res.Folded)
			}
			if err := compiler.CheckCompacted(tt.path, tt.body, res.Body); err != nil {
				t.Fatal(err)
			}
			for _, p := range tt.preamble {
				mustContainOnce(t, res.Body, p)
			}
			if !bytes.Contains(res.Body, []byte("messages=")) || !bytes.Contains(res.Body, []byte(`user=\"`+tt.person)) {
				t.Fatalf("the first summary does not quote the person: %s", summaries(res.Body))
			}
			if strings.Contains(summaries(res.Body), "system-reminder") || strings.Contains(summaries(res.Body), "environment_context") {
				t.Fatal("a summary quotes the client's session context")
			}
			again := compileAt(newCompiler(t, compactOpts(2, 4), compilertest.NewMemStore(), nil), tt.path, "t", tt.body)
			if !bytes.Equal(again.Body, res.Body) {
				t.Fatal("not deterministic")
			}
		})
	}
}

// summaries returns the fold summaries of a body, one a line.
func summaries(body []byte) string {
	var out []string
	for s := string(body); ; {
		i := strings.Index(s, artifact.FoldPrefix)
		if i < 0 {
			return strings.Join(out, "\n")
		}
		s = s[i:]
		j := strings.Index(s, `]"`)
		if j < 0 {
			j = len(s) - 1
		}
		out = append(out, s[:j+1])
		s = s[j+1:]
	}
}

// The oracle accepts exactly a receipt of the stable body with the wrapper
// unchanged around it, and nothing more.
func TestOracleWrappers(t *testing.T) {
	body := claudeCodeBody([]int{7, 8, 7}, "")
	res := compileAt(newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil), messagesPath, "t", body)
	if res.Receipts != 1 {
		t.Fatalf("fixture: %d receipts", res.Receipts)
	}
	out := string(res.Body)
	if err := compiler.CheckRewrite(messagesPath, body, res.Body); err != nil {
		t.Fatal(err)
	}
	wrapper := `\n` + jsonString(ccTokensLeft(ccTokens(0))) // the body's own last line break goes with the wrapper
	i := strings.Index(out, artifact.ReceiptPrefix)
	j := strings.Index(out[i:], "…]") + i + len("…]")
	receipt := out[i:j]
	file := strings.TrimRight(fixtures.ToolOutput(7, 9000), "\n")
	other := artifact.Receipt(sha256.Sum256([]byte(file+"x")), "Read", len([]rune(file)))
	tests := []struct {
		name, out, wantErr string
	}{
		{"wrapper vaulted with the body", strings.Replace(out, receipt+wrapper, artifact.Receipt(sha256.Sum256([]byte(file+"\n"+ccTokensLeft(ccTokens(0)))), "Read", len([]rune(file+"\n"+ccTokensLeft(ccTokens(0))))), 1), "wrapper part was vaulted"},
		{"wrapper changed", strings.Replace(out, receipt+wrapper, receipt+strings.Replace(wrapper, "14978145", "14978146", 1), 1), "not the original"},
		{"wrapper respelled", strings.Replace(out, receipt+wrapper, receipt+strings.Replace(wrapper, "<total_tokens>", `\u003ctotal_tokens>`, 1), 1), "wrapper bytes changed"},
		{"receipt of other content", strings.Replace(out, receipt, other, 1), "names other content"},
		{"text kept before the receipt", strings.Replace(out, receipt, "     1\t"+receipt, 1), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := compiler.CheckRewrite(messagesPath, body, []byte(tt.out))
			if err == nil || (tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// The oracle refuses a compaction that folded the session preamble.
func TestOraclePreamble(t *testing.T) {
	body := claudeCodeBody([]int{1, 2, 3, 4, 5, 6, 7, 8, 9}, "")
	res := compileAt(newCompiler(t, compactOpts(2, 4), compilertest.NewMemStore(), nil), messagesPath, "t", body)
	if res.Folded == 0 {
		t.Fatal("fixture: nothing folded")
	}
	pre := func(i int) string { return `{"text":` + string(rawJSON(ccPreamble[i])) + `,"type":"text"}` }
	kept := `{"content":[` + pre(0) + `,` + pre(1) + `],"role":"user"},`
	if !bytes.Contains(res.Body, []byte(kept)) {
		t.Fatalf("fixture: no kept preamble message")
	}
	tests := []struct{ name, out string }{
		{"preamble folded", strings.Replace(string(res.Body), kept, "", 1)},
		{"one preamble block dropped", strings.Replace(string(res.Body), kept, `{"content":[`+pre(0)+`],"role":"user"},`, 1)},
		{"person's text kept as preamble", strings.Replace(string(res.Body), kept, `{"content":[`+pre(0)+`,`+pre(1)+`,{"text":"Please fix","type":"text"}],"role":"user"},`, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := compiler.CheckCompacted(messagesPath, body, []byte(tt.out)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
