package compiler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// codexItems are the items of a Codex turn over the Responses socket:
// the provider's output items (as response.completed lists them) and the
// same items as the client re-sends them in its next whole history.
type codexItems struct{ provider, client []string }

func jsonStr(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// meta is Codex's own note on a history item, which the provider's
// output never carries.
func meta(n int) string {
	return fmt.Sprintf(`"internal_chat_message_metadata_passthrough":{"turn_id":"turn-%d","create_time":%d.5}`, n, 1796222477+n)
}

func codexCall(n int) codexItems {
	args := jsonStr(fmt.Sprintf(`{"cmd":"cat f%d.go"}`, n))
	return codexItems{
		provider: []string{
			fmt.Sprintf(`{"type":"reasoning","id":"rs_%d","summary":[],"encrypted_content":"gAAAA-enc-%d"}`, n, n),
			fmt.Sprintf(`{"type":"function_call","id":"fc_%d","status":"completed","arguments":%s,"call_id":"call_%d","name":"shell"}`, n, args, n),
		},
		// As Codex 0.171 re-sends them: its metadata added, content null.
		client: []string{
			fmt.Sprintf(`{"type":"reasoning","id":"rs_%d","summary":[],"content":null,"encrypted_content":"gAAAA-enc-%d",%s}`, n, n, meta(n)),
			fmt.Sprintf(`{"type":"function_call","status":"completed","id":"fc_%d","name":"shell","arguments":%s,"call_id":"call_%d",%s}`, n, args, n, meta(n)),
		},
	}
}

func codexAnswer(text string) codexItems {
	return codexItems{
		provider: []string{fmt.Sprintf(`{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"text":%s}]}`, jsonStr(text))},
		client:   []string{fmt.Sprintf(`{"type":"message","status":"completed","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":%s,"annotations":[]}],%s}`, jsonStr(text), meta(0))},
	}
}

func codexOutput(n int) string {
	return fmt.Sprintf(`{"type":"function_call_output","id":"fco_%d","call_id":"call_%d","output":%s,%s}`, n, n, jsonStr(fixtures.ToolOutput(n, 9000)), meta(n))
}

func codexUser(text string) string {
	return fmt.Sprintf(`{"type":"message","role":"user","content":[{"type":"input_text","text":%s}]}`, jsonStr(text))
}

func socketBody(prev string, items []string) []byte {
	p := ""
	if prev != "" {
		p = fmt.Sprintf(`"previous_response_id":%q,`, prev)
	}
	return []byte(`{"type":"response.create","model":"gpt-5",` + p + `"store":false,"input":[` + strings.Join(items, ",") + `]}`)
}

func completedEvent(id string, output []string) []byte {
	return []byte(fmt.Sprintf(`{"type":"response.completed","response":{"id":%q,"status":"completed","output":[%s]}}`, id, strings.Join(output, ",")))
}

// A turn's results delivered inline in previous_response_id continuations
// are known to the next turn's opening (the whole history again): they are
// receipted there, not carried inline a second time. Only a continuation
// of this tenant's and session's own chain counts; a continuation that
// names no recorded node, or a client that re-sends its history in
// another spelling, leaves the opening as without continuations.
func TestContinuationLineage(t *testing.T) {
	tests := []struct {
		name string
		// nextScope is the scope of the next opening; contScope of the
		// continuations.
		contScope, nextScope artifact.Scope
		chained              bool // the continuations name their chain (Request.Continues)
		respell              bool // the client re-sends the output items in another spelling
		wantReceipts         int
	}{
		{name: "chained", contScope: artifact.Scope{Tenant: "A"}, nextScope: artifact.Scope{Tenant: "A"}, chained: true, wantReceipts: 2},
		{name: "not chained", contScope: artifact.Scope{Tenant: "A"}, nextScope: artifact.Scope{Tenant: "A"}, wantReceipts: 0},
		{name: "other tenant", contScope: artifact.Scope{Tenant: "A"}, nextScope: artifact.Scope{Tenant: "B"}, chained: true, wantReceipts: 0},
		{name: "other session", contScope: artifact.Scope{Tenant: "A", Session: "s1"}, nextScope: artifact.Scope{Tenant: "A", Session: "s2"}, chained: true, wantReceipts: 0},
		{name: "respelled", contScope: artifact.Scope{Tenant: "A"}, nextScope: artifact.Scope{Tenant: "A"}, chained: true, respell: true, wantReceipts: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
			compile := func(scope artifact.Scope, body []byte, cont *compiler.Chain) compiler.Result {
				return c.Compile(context.Background(), compiler.Request{Path: responsesPath, Body: body, Scope: scope,
					Mode: compiler.ModeEnforce, Continues: cont, Chained: true})
			}
			history := []string{`{"type":"message","role":"developer","content":[{"type":"input_text","text":"You are Codex."}]}`, codexUser("fix the bug")}
			open := compile(tt.contScope, socketBody("", history), nil)
			if open.Chain.Length != len(history) {
				t.Fatalf("opening names chain length %d, want %d", open.Chain.Length, len(history))
			}
			node, prev := open.Chain, "resp_0"
			for n := 1; n <= 2; n++ {
				call := codexCall(n)
				var ok bool
				if node, ok = compiler.Continue(node, completedEvent(prev, call.provider)); !ok {
					t.Fatalf("continue %d failed", n)
				}
				var cont *compiler.Chain
				if tt.chained {
					cont = &node
				}
				res := compile(tt.contScope, socketBody(prev, []string{codexOutput(n)}), cont)
				if res.Receipts != 0 {
					t.Fatalf("continuation %d receipted its own first exposure", n)
				}
				node, prev = res.Chain, fmt.Sprintf("resp_%d", n)
				client := call.client
				if tt.respell {
					client = []string{client[0], strings.Replace(client[1], `"status":"completed",`, ``, 1)}
				}
				history = append(history, client...)
				history = append(history, codexOutput(n))
			}
			history = append(history, codexAnswer("done").client...)
			history = append(history, codexUser("now the tests"))
			next := compile(tt.nextScope, socketBody("", history), nil)
			if next.Receipts != tt.wantReceipts {
				t.Fatalf("next opening: %d receipts (%s/%s), want %d", next.Receipts, next.Decision, next.Reason, tt.wantReceipts)
			}
			if tt.wantReceipts > 0 {
				assertValidRewrite(t, responsesPath, socketBody("", history), next)
			}
		})
	}
}

// Continue reads only a completed response's output array; anything else
// leaves the chain as it was.
func TestContinueRefuses(t *testing.T) {
	node := compiler.Chain{End: artifact.Digest{1}, Length: 3}
	for _, ev := range []string{``, `{`, `{"type":"response.completed"}`, `{"response":{"output":{}}}`, `{"response":{"output":[1]}}`} {
		if got, ok := compiler.Continue(node, []byte(ev)); ok || got != node {
			t.Fatalf("%q continued: %+v", ev, got)
		}
	}
	if _, ok := compiler.Continue(compiler.Chain{}, completedEvent("r", nil)); ok {
		t.Fatal("a zero chain continued")
	}
	got, ok := compiler.Continue(node, completedEvent("r", codexCall(1).provider))
	if !ok || got.NextLength != 5 || got.Next == node.End || !got.Continued() {
		t.Fatalf("continued %+v %v", got, ok)
	}
}

// Codex's socket turn: a warm-up (generate:false) with the developer
// message alone, the opening continuing it with the rest of the whole
// history, then one continuation per tool call. Each turn's opening finds
// the previous turn's continuations (a node past the warm-up it
// continues), so a result delivered in a continuation is receipted in the
// next turn, and the response ids (unique per response at the provider)
// play no part in the chain.
func TestContinuationWarmUpTurns(t *testing.T) {
	c := newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
	scope := artifact.Scope{Tenant: "A"}
	compile := func(body []byte, cont *compiler.Chain) compiler.Result {
		return c.Compile(context.Background(), compiler.Request{Path: responsesPath, Body: body, Scope: scope,
			Mode: compiler.ModeEnforce, Continues: cont, Chained: true})
	}
	dev := `{"type":"message","role":"developer","content":[{"type":"input_text","text":"You are Codex."}]}`
	var history []string // after the developer message
	want := []int{0, 1, 2}
	for turn := 0; turn < 3; turn++ {
		warm := compile(socketBody("", []string{dev}), nil)
		node, ok := compiler.Continue(warm.Chain, completedEvent(fmt.Sprintf("resp_w%d", turn), nil))
		if !ok {
			t.Fatalf("turn %d: warm-up not continued (%+v)", turn, warm.Chain)
		}
		history = append(history, codexUser(fmt.Sprintf("task %d", turn)))
		open := compile(socketBody(fmt.Sprintf("resp_w%d", turn), history), &node)
		if open.Receipts != want[turn] {
			t.Fatalf("turn %d: opening has %d receipts (%s/%s), want %d", turn, open.Receipts, open.Decision, open.Reason, want[turn])
		}
		call := codexCall(turn + 1)
		node, _ = compiler.Continue(open.Chain, completedEvent(fmt.Sprintf("resp_o%d", turn), call.provider))
		res := compile(socketBody(fmt.Sprintf("resp_o%d", turn), []string{codexOutput(turn + 1)}), &node)
		if res.Receipts != 0 || res.Chain.Length != node.NextLength+1 {
			t.Fatalf("turn %d: continuation %d receipts, chain %d (want %d)", turn, res.Receipts, res.Chain.Length, node.NextLength+1)
		}
		history = append(history, call.client...)
		history = append(history, codexOutput(turn+1))
		history = append(history, codexAnswer("done").client...)
	}
}

// FuzzContinue: Continue reads a provider event of any shape without
// panicking, the same event continues the same way (determinism), and an
// event it refuses leaves the chain as it was.
func FuzzContinue(f *testing.F) {
	f.Add(completedEvent("r", codexCall(1).provider))
	f.Add(completedEvent("r", codexAnswer("ok").provider))
	f.Add([]byte(`{"response":{"output":[{"type":"reasoning","content":[]}]}}`))
	f.Add([]byte(`{"response":{"output":[[],{}]}}`))
	node := compiler.Chain{End: artifact.Digest{3}, Length: 2}
	f.Fuzz(func(t *testing.T, ev []byte) {
		a, okA := compiler.Continue(node, ev)
		b, okB := compiler.Continue(node, append([]byte(nil), ev...))
		if a != b || okA != okB {
			t.Fatalf("not deterministic: %+v %v, %+v %v", a, okA, b, okB)
		}
		if !okA && a != node {
			t.Fatalf("a refused event changed the chain: %+v", a)
		}
		if okA && (!a.Continued() || a.End != node.End || a.Length != node.Length) {
			t.Fatalf("continued %+v", a)
		}
	})
}

// A continuation naming a node the Store does not hold (never committed,
// expired, or another tenant's) is compiled on its own, as before: its
// chain is its own units', not the named node's.
func TestContinuationUnknownNode(t *testing.T) {
	store := compilertest.NewMemStore()
	c := newCompiler(t, compiler.Options{InlineLeases: 1}, store, nil)
	body := socketBody("resp_1", []string{codexOutput(1)})
	compile := func(tenant string, cont *compiler.Chain) compiler.Result {
		return c.Compile(context.Background(), compiler.Request{Path: responsesPath, Body: body, Scope: artifact.Scope{Tenant: tenant},
			Mode: compiler.ModeEnforce, Continues: cont, Chained: true})
	}
	open := c.Compile(context.Background(), compiler.Request{Path: responsesPath, Body: socketBody("", []string{codexUser("hi")}),
		Scope: artifact.Scope{Tenant: "A"}, Mode: compiler.ModeEnforce, Chained: true})
	known, _ := compiler.Continue(open.Chain, completedEvent("resp_1", codexCall(1).provider))
	unknown := compiler.Chain{End: artifact.Digest{9}, Length: 2, Next: artifact.Digest{8}, NextLength: 4}
	for _, tt := range []struct {
		name   string
		tenant string
		cont   *compiler.Chain
		want   int // the chain length the body names
	}{
		{"unknown node", "A", &unknown, 2},
		{"another tenant's node", "B", &known, 2},
		{"own node", "A", &known, known.NextLength + 1},
	} {
		if res := compile(tt.tenant, tt.cont); res.Chain.Length != tt.want {
			t.Fatalf("%s: chain length %d, want %d", tt.name, res.Chain.Length, tt.want)
		}
	}
}
