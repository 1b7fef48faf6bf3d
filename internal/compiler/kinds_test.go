package compiler_test

import (
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// TestReceiptKinds checks that Result.Kinds splits Receipts by cause and
// that Model and Conversation describe the request.
func TestReceiptKinds(t *testing.T) {
	out := fixtures.ToolOutput(1, 9000)
	dup := fixtures.ChatBody("gpt-4o", []fixtures.ChatTurn{
		{Tool: "bash", Args: `{"command":"cat a.py"}`, Output: out},
		{Tool: "bash", Args: `{"command":"cat a.py"}`, Output: out},
	}, "")
	turns := fixtures.Turns(10, 3, 9000)
	tests := []struct {
		name   string
		bodies [][]byte
		opts   compiler.Options
		want   compiler.ReceiptKinds // of the last request
	}{
		{"same-request duplicate", [][]byte{dup}, compiler.Options{InlineLeases: 1}, compiler.ReceiptKinds{Duplicate: 1}},
		{"compaction", [][]byte{conversation(9, 5000, nil)}, compactOpts(5, 0), compiler.ReceiptKinds{Compaction: 3}},
		{"leases", [][]byte{
			fixtures.ChatBody("gpt-4o", turns[:1], ""),
			fixtures.ChatBody("gpt-4o", turns[:2], ""),
			fixtures.ChatBody("gpt-4o", turns[:3], ""),
		}, compiler.Options{InlineLeases: 1}, compiler.ReceiptKinds{Lease: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCompiler(t, tt.opts, compilertest.NewMemStore(), nil)
			var res compiler.Result
			var conv artifact.Digest
			for i, body := range tt.bodies {
				res = compile(c, "t", body)
				if i == 0 {
					conv = res.Conversation
				} else if res.Conversation != conv {
					t.Fatalf("request %d: conversation changed", i+1)
				}
			}
			if res.Kinds != tt.want {
				t.Fatalf("kinds %+v, want %+v (receipts %d, %s %s)", res.Kinds, tt.want, res.Receipts, res.Decision, res.Reason)
			}
			if k := res.Kinds; k.Duplicate+k.Lease+k.Compaction != res.Receipts {
				t.Fatalf("kinds %+v do not add up to %d receipts", k, res.Receipts)
			}
			if res.Model != "gpt-4o" || res.Conversation == (artifact.Digest{}) {
				t.Fatalf("model %q conversation %x", res.Model, res.Conversation)
			}
		})
	}
}
