package gateway

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/wsrelay"
)

// A message answered through the recovery loop commits its lineage on
// the stitched response.completed, and a continuation of the loop's
// response extends its node through the output the client saw (the
// stitched one, with no trace of the tool); a loop whose follow-up was
// refused commits nothing, and its continuation names no node.
func TestWebSocketLoopContinuesLineage(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		node := compiler.Chain{End: artifact.Digest{7}, Length: 3}
		var mu sync.Mutex
		var seen []compiler.Request
		r := newWSLoopRigWith(t, &fakeCompiler{fn: func(_ context.Context, req compiler.Request) compiler.Result {
			mu.Lock()
			seen = append(seen, req)
			mu.Unlock()
			tool := strings.Contains(string(req.Body), "receipt")
			out := []byte(`{"type":"response.create","model":"m","store":false,"input":[],"tools":[{"type":"function","name":"token_terminator"}]}`)
			return compiler.Result{Body: out, Decision: compiler.Accepted, RawBytes: len(req.Body), SentBytes: len(out),
				RecoveryTool: tool, Commit: func() {}, Chain: node, Conversation: artifact.Digest{1}}
		}}, 30*time.Second)
		r.create(`{"type":"response.create","receipt":1}`)
		for _, ev := range callRound("resp_0") {
			if _, err := r.rc.Write(wsrelay.AppendFrame(nil, true, wsrelay.OpText, false, [4]byte{}, []byte(ev))); err != nil {
				t.Fatal(err)
			}
		}
		r.upstream() // the follow-up
		second := textRound("resp_1")
		if refuse {
			second = []string{`{"type":"error","error":{"message":"refused"}}`}
		}
		got := r.provider(second)
		final, id := got[len(got)-1], map[bool]string{false: "resp_1", true: "resp_0"}[refuse]
		// The loop's message settles once the client's stream has ended.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			if _, ok := r.rc.s.chain(id); ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("refused %v: %s never remembered", refuse, id)
			}
		}
		r.create(`{"type":"response.create","previous_response_id":"` + id + `","plain":1}`)
		mu.Lock()
		cont := seen[len(seen)-1].Continues
		mu.Unlock()
		if refuse {
			if cont != nil {
				t.Fatalf("a refused loop's continuation names %+v", *cont)
			}
			continue
		}
		want, ok := compiler.Continue(node, []byte(final))
		if !ok || cont == nil || *cont != want || strings.Contains(final, "call_tt") {
			t.Fatalf("continuation names %+v, want %+v (the stitched output: %s)", cont, want, final)
		}
	}
}
