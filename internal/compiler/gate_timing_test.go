package compiler_test

import (
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// TestGateTimed: Result.Gate is the final gate's own time, inside Total,
// and zero when no rewrite reached the gate.
func TestGateTimed(t *testing.T) {
	out := fixtures.ToolOutput(1, 9000)
	dup := fixtures.ChatBody("gpt-4o", []fixtures.ChatTurn{
		{Tool: "bash", Args: `{"command":"cat a.py"}`, Output: out},
		{Tool: "bash", Args: `{"command":"cat a.py"}`, Output: out},
	}, "")
	small := fixtures.ChatBody("gpt-4o", []fixtures.ChatTurn{
		{Tool: "bash", Args: `{"command":"ls"}`, Output: "a.py"},
	}, "")
	tests := []struct {
		name      string
		body      []byte
		wantGated bool
		decision  compiler.Decision
	}{
		{"rewrite reaches the gate", dup, true, compiler.Accepted},
		{"no slot: no gate", small, false, compiler.Passthrough},
		{"not JSON: no gate", []byte(`{"messages":`), false, compiler.Passthrough},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCompiler(t, compiler.Options{}, compilertest.NewMemStore(), nil)
			res := compile(c, "t", tt.body)
			if res.Decision != tt.decision {
				t.Fatalf("decision %s/%s, want %s", res.Decision, res.Reason, tt.decision)
			}
			if (res.Gate > 0) != tt.wantGated {
				t.Fatalf("Gate = %v, want gated=%v", res.Gate, tt.wantGated)
			}
			if res.Gate > res.Total {
				t.Fatalf("Gate %v exceeds Total %v", res.Gate, res.Total)
			}
		})
	}
}
