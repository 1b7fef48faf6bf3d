package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/fakeprovider"
	"github.com/tokenterminator/caddy-token-terminator/internal/wsrelay"
	"go.uber.org/zap/zaptest/observer"
)

// wsLoopRig is a relayed socket with the recovery loop, without Caddy:
// the test is the client (cc) and, through rc.Write, the provider;
// fwd carries what the relay forwards upstream, one message each.
type wsLoopRig struct {
	t    *testing.T
	rc   *relayConn
	cc   net.Conn
	cli  chan string // what the client got, one message each
	fwd  chan []byte
	logs *observer.ObservedLogs
}

func newWSLoopRig(t *testing.T, commits *atomic.Int32, wait time.Duration) *wsLoopRig {
	return newWSLoopRigWith(t, &fakeCompiler{fn: func(_ context.Context, req compiler.Request) compiler.Result {
		tool := strings.Contains(string(req.Body), "receipt")
		out := []byte(`{"type":"response.create","model":"m","store":false,"input":[],"tools":[{"type":"function","name":"token_terminator"}]}`)
		return compiler.Result{Body: out, Decision: compiler.Accepted, RawBytes: len(req.Body), SentBytes: len(out),
			RecoveryTool: tool, Commit: func() { commits.Add(1) }}
	}}, wait)
}

// newWSLoopRigWith is the rig with the compiler fc.
func newWSLoopRigWith(t *testing.T, fc *fakeCompiler, wait time.Duration) *wsLoopRig {
	h, logs := testHandler(t, fc, func(h *Gateway) {
		h.Mode = compiler.ModeEnforce
		h.Recovery = &RecoveryRuntime{mode: RecoveryTool, arts: stubArtifacts{}}
		h.BodyReadTimeout = wait
	})
	cc, sc := net.Pipe()
	s := &wsSession{h: h, ctx: context.Background(), path: "/v1/responses", scope: artifact.Scope{Tenant: "t"}}
	rc := &relayConn{Conn: sc, injecting: true, s: s}
	rc.rd = wsrelay.NewReader(sc, 1<<20, s.rewrite)
	rc.rd.EnableInject()
	rc.tap = &wsrelay.Tap{W: sc, Max: wsEventMax, On: s.providerMessage, Divert: s.divert, Diverted: s.diverted, Dropped: s.droppedMessage}
	s.rc = rc
	r := &wsLoopRig{t: t, rc: rc, cc: cc, cli: make(chan string, 64), fwd: make(chan []byte, 16), logs: logs}
	t.Cleanup(func() { rc.Close(); cc.Close() })
	go func() { // the client
		br := bufio.NewReader(cc)
		for {
			_, p, err := fakeprovider.ReadFrame(br)
			if err != nil {
				close(r.cli)
				return
			}
			r.cli <- string(p)
		}
	}()
	go func() { // reverse_proxy's copier to the provider
		br := bufio.NewReader(readerFunc(rc.Read))
		for {
			_, p, err := fakeprovider.ReadFrame(br)
			if err != nil {
				close(r.fwd)
				return
			}
			r.fwd <- p
		}
	}()
	return r
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// create sends a client message and returns what went upstream for it.
func (r *wsLoopRig) create(msg string) []byte {
	go r.cc.Write(wsrelay.ClientText([]byte(msg)))
	return r.upstream()
}

func (r *wsLoopRig) upstream() []byte {
	p, ok := <-r.fwd
	if !ok {
		r.t.Fatal("the relay's upstream stream ended")
	}
	return p
}

// provider sends provider messages and returns the client's messages up
// to the response's end.
func (r *wsLoopRig) provider(evs []string) []string {
	for _, ev := range evs {
		if _, err := r.rc.Write(wsrelay.AppendFrame(nil, true, wsrelay.OpText, false, [4]byte{}, []byte(ev))); err != nil {
			r.t.Fatal(err)
		}
	}
	var got []string
	for len(got) == 0 || !strings.Contains(got[len(got)-1], `"type":"response.completed"`) {
		m, ok := <-r.cli
		if !ok {
			r.t.Fatalf("the client's stream ended after %q", got)
		}
		got = append(got, m)
	}
	return got
}

func callRound(id string) []string {
	item := `{"type":"function_call","id":"fc_1","call_id":"call_tt","name":"token_terminator","arguments":"{\"action\":\"artifact_get\",\"artifact_id\":\"a_00\"}","status":"completed"}`
	return []string{
		`{"type":"response.created","sequence_number":0,"response":{"id":"` + id + `","output":[],"tools":[]}}`,
		`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":` + item + `}`,
		`{"type":"response.output_item.done","sequence_number":2,"output_index":0,"item":` + item + `}`,
		`{"type":"response.completed","sequence_number":3,"response":{"id":"` + id + `","output":[` + item + `],"tools":[],"usage":{"input_tokens":10,"output_tokens":1,"total_tokens":11}}}`,
	}
}

func textRound(id string) []string {
	item := `{"type":"message","id":"msg_` + id + `","role":"assistant","content":[{"type":"output_text","text":"done"}]}`
	return []string{
		`{"type":"response.created","sequence_number":0,"response":{"id":"` + id + `","output":[],"tools":[]}}`,
		`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":` + item + `}`,
		`{"type":"response.output_item.done","sequence_number":2,"output_index":0,"item":` + item + `}`,
		`{"type":"response.completed","sequence_number":3,"response":{"id":"` + id + `","output":[` + item + `],"tools":[],"usage":{"input_tokens":20,"output_tokens":2,"total_tokens":22}}}`,
	}
}

// The loop over a relayed socket: the follow-up is injected chained to the
// round's response; the client gets one response (no tool, sequence
// numbers in a row, the last round's id, usage summed); the lineage
// commits once, on the final response.completed, or not at all when the
// follow-up is refused; a message after the loop settles on its own.
func TestWebSocketLoopCommitsOnce(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		var commits atomic.Int32
		r := newWSLoopRig(t, &commits, 30*time.Second)
		r.create(`{"type":"response.create","receipt":1}`)
		for _, ev := range callRound("resp_0") {
			if _, err := r.rc.Write(wsrelay.AppendFrame(nil, true, wsrelay.OpText, false, [4]byte{}, []byte(ev))); err != nil {
				t.Fatal(err)
			}
		}
		var fu struct {
			Prev  string `json:"previous_response_id"`
			Input []struct {
				Type   string `json:"type"`
				CallID string `json:"call_id"`
			} `json:"input"`
		}
		if err := json.Unmarshal(r.upstream(), &fu); err != nil || fu.Prev != "resp_0" || len(fu.Input) != 1 || fu.Input[0].CallID != "call_tt" || fu.Input[0].Type != "function_call_output" {
			t.Fatalf("follow-up %+v (%v)", fu, err)
		}
		second := textRound("resp_1")
		if refuse {
			second = []string{`{"type":"error","error":{"message":"refused"}}`}
		}
		got := r.provider(second)
		for i, m := range got {
			if strings.Contains(m, "token_terminator") || strings.Contains(m, "call_tt") || !strings.Contains(m, fmt.Sprintf(`"sequence_number":%d`, i)) {
				t.Fatalf("refused %v: client message %d: %s", refuse, i, m)
			}
		}
		last := got[len(got)-1]
		wantID, wantUsage := `"id":"resp_1"`, `"input_tokens":30`
		if refuse {
			wantID, wantUsage = `"id":"resp_0"`, `"input_tokens":10`
		}
		if !strings.Contains(last, `"type":"response.completed"`) || !strings.Contains(last, wantID) || !strings.Contains(last, wantUsage) {
			t.Fatalf("refused %v: final message %s", refuse, last)
		}
		if n := commits.Load(); n != map[bool]int32{false: 1, true: 0}[refuse] {
			t.Fatalf("refused %v: %d commits", refuse, n)
		}
		r.create(`{"type":"response.create","plain":1}`)
		if got := r.provider(textRound("resp_2")); len(got) != 4 {
			t.Fatalf("a plain message after the loop: client got %q", got)
		}
		if n := commits.Load(); n != map[bool]int32{false: 2, true: 1}[refuse] {
			t.Fatalf("refused %v: %d commits after the plain message", refuse, n)
		}
	}
}

// A follow-up the provider does not start answering within
// body_read_timeout: the client's response is ended from the first
// response, nothing is committed, the late answer never reaches the
// client, and the next message is served.
func TestWebSocketLoopFollowUpDeadline(t *testing.T) {
	var commits atomic.Int32
	r := newWSLoopRig(t, &commits, time.Millisecond)
	r.create(`{"type":"response.create","receipt":1}`)
	got := r.provider(callRound("resp_0")) // ends when the deadline passes
	last := got[len(got)-1]
	if !strings.Contains(last, `"id":"resp_0"`) || strings.Contains(strings.Join(got, ""), "call_tt") {
		t.Fatalf("client got %q", got)
	}
	go r.cc.Write(wsrelay.ClientText([]byte(`{"type":"response.create","plain":1}`)))
	if p := r.upstream(); strings.Contains(string(p), `"previous_response_id":"resp_0"`) {
		// The follow-up went out before its deadline passed (otherwise
		// it was withdrawn): its late answer is dropped.
		for _, ev := range textRound("resp_1") {
			if _, err := r.rc.Write(wsrelay.AppendFrame(nil, true, wsrelay.OpText, false, [4]byte{}, []byte(ev))); err != nil {
				t.Fatal(err)
			}
		}
		r.upstream() // the plain message
	}
	got = r.provider(textRound("resp_2"))
	if len(got) != 4 || !strings.Contains(got[3], `"id":"resp_2"`) || commits.Load() != 1 {
		t.Fatalf("after the deadline: client got %q, %d commits", got, commits.Load())
	}
}
