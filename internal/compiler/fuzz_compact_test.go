package compiler_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
)

// FuzzCompileCompacted runs the compiler with context compaction on (small
// windows, so folding happens on short histories) over all three formats:
// whatever the body, no panic and no refused rewrite; a pass-through is the
// original bytes; an accepted rewrite is strictly smaller and passes the
// independent oracle (summaries stand for whole turns, receipts only in
// slots, provider rules kept); a retry compiles to the same bytes.
func FuzzCompileCompacted(f *testing.F) {
	small := func(msgs []any) []any { return msgs }
	f.Add(uint8(0), conversation(9, 600, small))
	f.Add(uint8(1), anthropicConversation(9, false))
	f.Add(uint8(1), anthropicConversation(9, true))
	f.Add(uint8(2), responsesConversation(9))
	f.Add(uint8(0), []byte(`{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"system","content":"s"},{"role":"user","content":"c"},{"role":"user","content":"d"},{"role":"user","content":"e"}]}`))
	// Real-shaped client sessions: wrapped tool results, session preamble,
	// thinking with context_management.
	f.Add(uint8(0), chatWrappedBodySized([]int{1, 2, 1, 3, 4}, 200))
	f.Add(uint8(1), claudeCodeBodySized([]int{1, 2, 1, 3, 4}, ccContextManagement, 200))
	f.Add(uint8(2), codexBodySized([]int{1, 2, 1, 3, 4}, 200))
	paths := []string{chatPath, "/v1/messages", "/v1/responses"}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		path := paths[int(which)%len(paths)]
		opts := compiler.Options{MinArtifactChars: 64, InlineLeases: 1, Compaction: compiler.Compaction{
			Enabled: true, MinVaultChars: 32, CollapseAfterTurns: 1, InlineRecentTurns: 1}}
		c, err := compiler.New(opts, compilertest.NewMemStore(), nil)
		if err != nil {
			t.Fatal(err)
		}
		orig := bytes.Clone(body)
		var first []byte
		for i := 0; i < 2; i++ {
			res := c.Compile(t.Context(), compiler.Request{Path: path, Body: body, Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce})
			switch res.Reason {
			case compiler.ReasonPanic, compiler.ReasonInternal, compiler.ReasonInvalidOutput:
				t.Fatalf("compiler %s", res.Reason)
			}
			if !bytes.Equal(body, orig) {
				t.Fatal("input modified")
			}
			if res.Decision != compiler.Accepted {
				if !bytes.Equal(res.Body, body) {
					t.Fatal("pass-through changed bytes")
				}
				continue
			}
			if len(res.Body) >= len(body) || !json.Valid(res.Body) {
				t.Fatalf("accepted a rewrite of %d bytes for %d, or invalid JSON", len(res.Body), len(body))
			}
			if err := compiler.CheckCompacted(path, body, res.Body); err != nil {
				t.Fatalf("oracle: %v", err)
			}
			if i == 0 {
				first = res.Body
			} else if res.Reason == "" && first != nil && !bytes.Equal(first, res.Body) && res.Receipts == 0 {
				// With no lease in play the second pass must repeat the first.
				t.Fatal("not deterministic")
			}
		}
	})
}
