package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
)

// Over the socket each response.create is compiled; its lineage is
// committed on the provider's response.completed and dropped on a failure,
// in the order the messages went out; other messages are not compiled; a
// rewrite carrying the recovery tool is not forwarded where its loop cannot
// run (no relay to inject follow-ups).
func TestWebSocketSessionCommitsOnCompleted(t *testing.T) {
	var committed []string
	fc := &fakeCompiler{fn: func(_ context.Context, req compiler.Request) compiler.Result {
		name := string(req.Body)
		out := []byte(strings.Replace(name, "long", "r", 1))
		return compiler.Result{Body: out, Decision: compiler.Accepted, RawBytes: len(req.Body), SentBytes: len(out),
			RecoveryTool: strings.Contains(name, "tool"), Commit: func() { committed = append(committed, name) }}
	}}
	h, logs := testHandler(t, fc, func(h *Gateway) { h.Mode = compiler.ModeEnforce })
	s := &wsSession{h: h, ctx: context.Background(), path: "/v1/responses", scope: artifact.Scope{Tenant: "t"}}

	if _, ok := s.rewrite([]byte(`{"type":"session.update","x":"long"}`)); ok || fc.calls.Load() != 0 {
		t.Fatal("a message of another type was compiled")
	}
	a := `{"type":"response.create","a":"long"}`
	b := `{"type":"response.create","b":"long"}`
	c := `{"type":"response.create","c":"long tool"}`
	if out, ok := s.rewrite([]byte(a)); !ok || string(out) != `{"type":"response.create","a":"r"}` {
		t.Fatalf("a: %q %v", out, ok)
	}
	if _, ok := s.rewrite([]byte(b)); !ok {
		t.Fatal("b not rewritten")
	}
	if _, ok := s.rewrite([]byte(c)); ok {
		t.Fatal("a rewrite carrying the recovery tool was forwarded without its loop")
	}
	s.providerMessage([]byte(`{"type":"response.output_text.delta","delta":"x"}`))
	s.providerMessage([]byte(`{"type":"response.failed"}`)) // a's
	s.providerMessage([]byte(`{"type":"response.completed"}`))
	s.providerMessage([]byte(`{"type":"response.completed"}`)) // c's: nothing to commit
	if len(committed) != 1 || committed[0] != b {
		t.Fatalf("committed %q, want only b", committed)
	}
	var lines, declined int
	for _, e := range logs.All() {
		if e.Message == "websocket message" {
			lines++
			if e.ContextMap()["reason"] == string(ReasonRecoveryUnavailable) {
				declined++
			}
		}
	}
	if lines != 3 || declined != 1 {
		t.Fatalf("%d message lines, %d declined for the tool", lines, declined)
	}
}
