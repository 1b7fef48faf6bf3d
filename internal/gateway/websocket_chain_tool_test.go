package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
)

// chainToolCompiler plays the compiler for one message at a time: a
// message holding "receipt" is rewritten with the recovery tool appended
// to its tools (as the compiler appends it), any other goes as it came.
func chainToolCompiler(t *testing.T) *fakeCompiler {
	return &fakeCompiler{fn: func(_ context.Context, req compiler.Request) compiler.Result {
		res := compiler.Result{Decision: compiler.Passthrough, RawBytes: len(req.Body), SentBytes: len(req.Body),
			Conversation: artifact.Digest{1}}
		if !bytes.Contains(req.Body, []byte("receipt")) {
			return res
		}
		out, _, ok := withChainTool(req.Body, recovery.Definition(provider.Responses))
		if !ok {
			t.Fatalf("the rig's rewrite of %s", req.Body)
		}
		res.Decision, res.Body, res.SentBytes, res.RecoveryTool = compiler.Accepted, out, len(out), true
		return res
	}}
}

// toolsOf is a message's tools array, as its bytes.
func toolsOf(t *testing.T, msg []byte) string {
	t.Helper()
	var m struct {
		Tools json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		t.Fatalf("upstream message %s: %v", msg, err)
	}
	return string(m.Tools)
}

// A continuation's tools follow its chain over the socket: the provider
// bills the chain's whole history, tools first, so a tools array that
// changes between a turn's messages re-bills it all uncached. A
// continuation of a chain that carried the recovery tool carries it too
// (the same bytes, in the same place) even with nothing to replace; one
// of a chain that went without it carries none, its rewrite declined; a
// warm-up (generate:false) decides nothing for the turn it precedes.
func TestWebSocketContinuationToolsFollowChain(t *testing.T) {
	history := strings.Repeat(`{"type":"message","role":"user","content":"old"},`, 40)
	opening := func(extra string) string {
		return `{"type":"response.create","model":"gpt-5","tools":[{"type":"function","name":"exec"}],"input":[` + history + `{"type":"message","role":"user","content":"` + extra + `"}]}`
	}
	cont := func(prev, extra string) string {
		return `{"type":"response.create","model":"gpt-5","previous_response_id":"` + prev + `","tools":[{"type":"function","name":"exec"}],"input":[{"type":"function_call_output","call_id":"c1","output":"` + extra + `"}]}`
	}
	warmUp := `{"type":"response.create","model":"gpt-5","generate":false,"tools":[{"type":"function","name":"exec"}],"input":[]}`
	cases := []struct {
		name  string
		first string // the chain's first message (answered resp_0)
		then  string // what continues resp_0
		tool  bool   // the continuation goes out with the tool
		same  bool   // its tools array is its chain's
		added bool   // the tool was added for the chain (chain_tool_added on its log line)
	}{
		{"chain with the tool, nothing to replace", opening("receipt"), cont("resp_0", "new"), true, true, true},
		{"chain with the tool, the continuation rewritten", opening("receipt"), cont("resp_0", "receipt"), true, true, false},
		{"chain without the tool, nothing to replace", opening("plain"), cont("resp_0", "new"), false, true, false},
		{"chain without the tool, a rewrite adding it", opening("plain"), cont("resp_0", "receipt"), false, true, false},
		{"a warm-up's continuation decides", warmUp, cont("resp_0", "receipt"), true, false, false},
		{"unknown response id", opening("receipt"), cont("resp_x", "new"), false, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newWSLoopRigWith(t, chainToolCompiler(t), 30*time.Second)
			first := r.create(c.first)
			r.provider(textRound("resp_0"))
			got := r.create(c.then)
			if c.tool != strings.Contains(toolsOf(t, got), `"name":"`+recovery.ToolName+`"`) {
				t.Fatalf("continuation went out with tools %s; want the tool: %v", toolsOf(t, got), c.tool)
			}
			if c.same && toolsOf(t, got) != toolsOf(t, first) {
				t.Fatalf("continuation's tools %s differ from its chain's %s", toolsOf(t, got), toolsOf(t, first))
			}
			if !c.tool && !strings.Contains(c.then, "receipt") && string(got) != c.then {
				t.Fatalf("a continuation without the tool changed: %s", got)
			}
			r.provider(textRound("resp_1")) // the loop, when the tool went out, ends the response
			lines := r.logs.FilterMessage("websocket message").All()
			if len(lines) != 2 {
				t.Fatalf("%d websocket message lines", len(lines))
			}
			if added, _ := lines[1].ContextMap()["chain_tool_added"].(bool); added != c.added {
				t.Fatalf("chain_tool_added %v on the continuation's line, want %v", added, c.added)
			}
		})
	}
}

// toolPays adds the tool only when the chain's held history, read from
// the cache with it, saves more than the tool costs, and only within the
// cache's TTL.
func TestWebSocketChainToolPays(t *testing.T) {
	h, _ := testHandler(t, &fakeCompiler{}, nil)
	s := &wsSession{h: h}
	now := time.Now()
	for _, c := range []struct {
		name string
		c    wsChainTool
		want bool
	}{
		{"history far larger than the tool", wsChainTool{held: 100_000, n: 1, last: now}, true},
		{"history smaller than the tool's cached price", wsChainTool{held: 1_000 + 50 + 100 + 10, n: 1, last: now}, false},
		{"only tools held", wsChainTool{held: 1_100, n: 1, last: now}, false},
		{"cache expired", wsChainTool{held: 100_000, n: 1, last: now.Add(-24 * time.Hour)}, false},
	} {
		if got := s.toolPays(c.c, 1_000, 100, "gpt-5"); got != c.want {
			t.Errorf("%s: toolPays %v, want %v", c.name, got, c.want)
		}
	}
}
