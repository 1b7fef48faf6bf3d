package gateway

import (
	"context"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
)

// TestWebSocketContinuesLineage: a continuation of a response whose
// lineage was committed on its response.completed is compiled with that
// message's node continued through the response's output items
// (compiler.Request.Continues); a continuation of a response that
// committed nothing (failed), of a response another socket produced, or
// a turn's opening gets none. Every socket message is compiled Chained.
func TestWebSocketContinuesLineage(t *testing.T) {
	output := `[{"type":"function_call","id":"fc_1","status":"completed","name":"shell","arguments":"{}","call_id":"c1"}]`
	done := func(id string) string {
		return `{"type":"response.completed","response":{"id":"` + id + `","model":"gpt-5","output":` + output + `,"usage":{"input_tokens":9,"output_tokens":1}}}`
	}
	tests := []struct {
		name     string
		terminal string
		prev     string // the continuation's previous_response_id
		want     bool   // the continuation names the continued node
	}{
		{"completed", done("r1"), "r1", true},
		{"failed", `{"type":"response.failed","response":{"id":"r1"}}`, "r1", false},
		{"unknown response", done("r1"), "r9", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWSTest(t, nil)
			var seen []compiler.Request
			inner := wsCompiler(&w.commits).fn
			node := compiler.Chain{End: artifact.Digest{7}, Length: 3}
			w.h.Compile = func(ctx context.Context, req compiler.Request) compiler.Result {
				seen = append(seen, req)
				res := inner(ctx, req)
				res.Chain = node
				return res
			}
			w.relay(t, wsMessageBody("a", ""))
			w.answer("r1", tt.terminal)
			w.relay(t, wsMessageBody("a", tt.prev))
			if len(seen) != 2 || !seen[0].Chained || !seen[1].Chained || seen[0].Continues != nil {
				t.Fatalf("requests %+v", seen)
			}
			got := seen[1].Continues
			if !tt.want {
				if got != nil {
					t.Fatalf("continuation names %+v", *got)
				}
				return
			}
			want, _ := compiler.Continue(node, []byte(done("r1")))
			if got == nil || *got != want || !got.Continued() {
				t.Fatalf("continuation names %+v, want %+v", got, want)
			}
		})
	}
}
