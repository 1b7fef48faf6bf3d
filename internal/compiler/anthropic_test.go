package compiler_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

func TestAnthropicDuplicates(t *testing.T) {
	out := fixtures.ToolOutput(1, 9000)
	turns := []fixtures.ChatTurn{
		{Tool: "Read", Args: `{"file_path":"/a.py"}`, Output: out},
		{Tool: "Bash", Args: `{"command":"ls"}`, Output: fixtures.ToolOutput(2, 9000)},
		{Tool: "Read", Args: `{"file_path":"/a.py"}`, Output: out},
	}
	opts := []fixtures.AnthropicOptions{{}, {System: true, Thinking: true, CacheLast: true}, {PartsOutput: true}, {System: true, Thinking: true, PartsOutput: true, CacheLast: true}}
	for _, o := range opts {
		body := fixtures.AnthropicBody("claude-sonnet-4-5", turns, "go on", o)
		store := compilertest.NewMemStore()
		c := newCompiler(t, compiler.Options{}, store, nil)
		res := compileAt(c, messagesPath, "t1", body)
		if res.Decision != compiler.Accepted || res.Receipts != 1 || res.Format != "anthropic_messages" {
			t.Fatalf("%+v: %s/%s receipts %d format %s", o, res.Decision, res.Reason, res.Receipts, res.Format)
		}
		assertValidRewrite(t, messagesPath, body, res)
		msgs := decode(t, res.Body)["messages"].([]any)
		first := msgs[2].(map[string]any)["content"].([]any)[0].(map[string]any)
		s, marked := resultText(first["content"])
		if !strings.HasPrefix(s, artifact.ReceiptPrefix) || !strings.Contains(s, "tool=Read") {
			t.Fatalf("older copy not receipted: %.80q", s)
		}
		// With the client's breakpoint on the newest message (and one
		// free), the receipt goes out as a block list carrying its own
		// breakpoint; without breakpoints, as a string.
		if _, list := first["content"].([]any); list != o.CacheLast || marked != o.CacheLast {
			t.Fatalf("%+v: receipt as a list %v, with a breakpoint %v", o, list, marked)
		}
		if first["type"] != "tool_result" || first["tool_use_id"] != "toolu_00" {
			t.Fatalf("block fields changed: %v", first)
		}
		d := storedDigest(store, "t1", out)
		a, ok, _ := store.Get(t.Context(), "t1", d)
		if !ok || a.Text != out || a.Tool != "Read" || a.Args != `{"file_path":"/a.py"}` {
			t.Fatalf("artifact not stored with provenance: ok=%v tool=%q args=%q", ok, a.Tool, a.Args)
		}
	}
}

func TestAnthropicLeasesRetryTenants(t *testing.T) {
	turns := fixtures.Turns(10, 3, 9000)
	o := fixtures.AnthropicOptions{System: true, Thinking: true}
	c := newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
	var steps [][]byte
	for i := 1; i <= 3; i++ {
		// Claude Code moves its cache_control breakpoint to the last
		// tool_result every step; lineage is blind to it.
		o.CacheLast = true
		steps = append(steps, fixtures.AnthropicBody("claude-sonnet-4-5", turns[:i], "", o))
	}
	for i, body := range steps {
		res := compileAt(c, messagesPath, "A", body)
		if res.Receipts != i {
			t.Fatalf("step %d: %d receipts (%s/%s), want %d", i+1, res.Receipts, res.Decision, res.Reason, i)
		}
		assertValidRewrite(t, messagesPath, body, res)
		if again := compileAt(c, messagesPath, "A", body); !bytes.Equal(again.Body, res.Body) {
			t.Fatalf("step %d: retry compiled differently", i+1)
		}
	}
	if res := compileAt(c, messagesPath, "B", steps[1]); res.Receipts != 0 {
		t.Fatalf("tenant B consumed tenant A's lease")
	}
	// Without a system prompt it is another conversation.
	other := fixtures.AnthropicBody("claude-sonnet-4-5", turns[:2], "", fixtures.AnthropicOptions{Thinking: true})
	if res := compileAt(c, messagesPath, "A", other); res.Receipts != 0 {
		t.Fatalf("another system prompt shares the lineage")
	}
}

// A hand-written body with every block the format must leave alone, and a
// tool_result whose is_error and cache_control must stay on the block.
func TestAnthropicBytePreservationAndNeverTouch(t *testing.T) {
	out := fixtures.ToolOutput(40, 8500)
	big := jstr(out)
	sig := `"` + strings.Repeat("EqQBCkYIBxgCKkDz", 40) + `"`
	thinking := `{"type":"thinking","thinking":` + big + `,"signature":` + sig + `}`
	redacted := `{"type":"redacted_thinking","data":` + sig + `}`
	server := `{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"x"}}`
	serverResult := `{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","url":"u","title":"t","encrypted_content":` + big + `}]}`
	image := `{"type":"tool_result","tool_use_id":"toolu_img","content":[{"type":"text","text":` + big + `},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}}]}`
	document := `{"type":"tool_result","tool_use_id":"toolu_doc","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":` + big + `}}]}`
	cached := `{"type":"tool_result","tool_use_id":"toolu_cc","content":[{"type":"text","text":` + big + `,"cache_control":{"type":"ephemeral"}}]}`
	errBlock := `{"type" : "tool_result", "tool_use_id":"toolu_1", "is_error": true, "content":` + big + `, "cache_control": {"type":"ephemeral","ttl":"1h"}}`
	system := `[{"type":"text","text":` + big + `,"cache_control":{"type":"ephemeral","ttl":"1h"}}]`
	tools := `[{"name":"Read","description":` + big + `,"input_schema":{"type":"object"}}]`
	body := []byte(`{ "model":"claude-sonnet-4-5", "max_tokens": 32000, "system":` + system + `, "tools":` + tools + `,` +
		"\n \"messages\": [\n" +
		` {"role":"user","content":[{"type":"text","text":` + big + `},{"type":"document","source":{"type":"text","media_type":"text/plain","data":` + big + `}}]},` +
		` {"role":"assistant","content":[` + thinking + `,` + redacted + `,` + server + `,` + serverResult + `,{"type":"text","text":"Reading."},` +
		`{"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"/a.py","limit":2.50e1}},` +
		`{"type":"tool_use","id":"toolu_img","name":"Screenshot","input":{}},{"type":"tool_use","id":"toolu_doc","name":"Fetch","input":{}},{"type":"tool_use","id":"toolu_cc","name":"Read","input":{}}]},` +
		` {"role":"user","content":[` + errBlock + `,` + image + `,` + document + `,` + cached + `,{"type":"text","text":"and?"}]},` +
		` {"role":"assistant","content":[` + thinking + `,{"type":"tool_use","id":"toolu_2","name":"Read","input":{"file_path":"/a.py"}}]},` +
		` {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":` + big + `}]}` +
		"\n ], \"stream\": true, \"metadata\": {\"user_id\": \"u\\u00e9\"} }")
	store := compilertest.NewMemStore()
	c := newCompiler(t, compiler.Options{}, store, nil)
	res := compileAt(c, messagesPath, "t", body)
	if res.Decision != compiler.Accepted || res.Receipts != 1 {
		t.Fatalf("got %s/%s receipts=%d slots=%d", res.Decision, res.Reason, res.Receipts, res.Slots)
	}
	assertValidRewrite(t, messagesPath, body, res)
	for _, keep := range []string{`"system":` + system, `"tools":` + tools, thinking, redacted, server, serverResult, image, document, cached,
		`{"type":"tool_result","tool_use_id":"toolu_2","content":` + big + `}`} {
		if !bytes.Contains(res.Body, []byte(keep)) {
			t.Fatalf("never-touch region changed: %.80q", keep)
		}
	}
	r := receipts(t, res.Body)[0]
	want := `{"type" : "tool_result", "tool_use_id":"toolu_1", "is_error": true, "content":` + jstr(r) + `, "cache_control": {"type":"ephemeral","ttl":"1h"}}`
	if !bytes.Contains(res.Body, []byte(want)) || !strings.Contains(r, "tool=Read") {
		t.Fatalf("tool_result block fields not kept around the receipt %q", r)
	}
	d := strDigest(out)
	if a, _, _ := store.Get(t.Context(), "t", d); a.Args != `{"file_path":"/a.py","limit":2.50e1}` {
		t.Fatalf("args are not the raw input: %q", a.Args)
	}
}

func TestAnthropicPassThrough(t *testing.T) {
	o := fixtures.ToolOutput(3, 9000)
	dup := fixtures.AnthropicBody("claude", []fixtures.ChatTurn{{Tool: "Read", Output: o}, {Tool: "Read", Output: o}}, "", fixtures.AnthropicOptions{})
	withCM := append([]byte(`{"context_management":{"edits":[{"type":"compact_20260112"}]},`), dup[1:]...)
	withCMNull := append([]byte(`{"context_management":null,`), dup[1:]...)
	big := jstr(strings.Repeat("x", 9000))
	tests := []struct {
		name, body string
		reason     compiler.Reason
	}{
		{"context_management", string(withCM), "provider_context_management"},
		{"context_management null", string(withCMNull), "provider_context_management"},
		{"messages missing", `{"model":"claude"}`, "unknown_shape"},
		{"messages object", `{"messages":{}}`, "unknown_shape"},
		{"message not object", `{"messages":["hi"]}`, "unknown_shape"},
		{"top-level string", `"x"`, "unknown_shape"},
		{"no messages", `{"messages":[]}`, "no_candidates"},
		{"string contents", `{"system":` + big + `,"messages":[{"role":"user","content":` + big + `},{"role":"assistant","content":` + big + `}]}`, "no_candidates"},
		{"content null", `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":null},{"type":"tool_result","tool_use_id":"b"}]}]}`, "no_candidates"},
		{"image result", `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"image","source":{}}]}]}]}`, "no_candidates"},
		{"text with citations", `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"text","text":` + big + `,"citations":[]}]},{"type":"tool_result","tool_use_id":"a","content":[{"type":"text","text":` + big + `,"citations":[]}]}]}]}`, "no_candidates"},
		{"tool_result from assistant", `{"messages":[{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"a","content":` + big + `},{"type":"tool_result","tool_use_id":"a","content":` + big + `}]}]}`, "no_candidates"},
		{"one large result", `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":` + big + `}]}]}`, "nothing_to_replace"},
		{"truncated", `{"messages":[{"role":"user","content":` + big, "invalid_json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCompiler(t, compiler.Options{}, compilertest.NewMemStore(), nil)
			body := []byte(tt.body)
			res := compileAt(c, messagesPath, "t", body)
			if res.Decision != compiler.Passthrough || res.Reason != tt.reason {
				t.Fatalf("got %s/%s, want passthrough/%s", res.Decision, res.Reason, tt.reason)
			}
			if !bytes.Equal(res.Body, body) || (len(body) > 0 && &res.Body[0] != &body[0]) {
				t.Fatalf("pass-through is not the original slice")
			}
		})
	}
}

// Bad input: each compiles validly or passes through byte-identical.
func TestAnthropicBadInput(t *testing.T) {
	big := jstr(fixtures.ToolOutput(9, 9000))
	use := func(id string) string {
		return `{"role":"assistant","content":[{"type":"tool_use","id":"` + id + `","name":"bash","input":{}}]}`
	}
	res := func(id, extra string) string {
		return `{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + id + `","content":` + big + `}` + extra + `]}`
	}
	tests := []struct {
		name     string
		body     string
		receipts int
	}{
		{"unknown block types", `{"messages":[` + use("a") + `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":` + big + `},{"type":"future_block","x":` + big + `}]},{"role":"assistant","content":[{"type":"mystery"},{"type":"tool_use","id":"b","name":"bash","input":{}}]},` + res("b", "") + `]}`, 1},
		{"content null beside", `{"messages":[` + use("a") + `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":null}]},` + use("b") + `,` + res("b", "") + `,` + use("c") + `,` + res("c", "") + `]}`, 1},
		{"unknown id", `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"ghost","content":` + big + `}]},{"role":"assistant","content":"ok"},` + res("ghost2", "") + `]}`, 1},
		{"ids with dot and colon reused", `{"messages":[` + use("functions.bash:0") + `,` + res("functions.bash:0", "") + `,` + use("functions.bash:0") + `,` + res("functions.bash:0", "") + `]}`, 1},
		{"assistant content empty and null", `{"messages":[{"role":"assistant","content":""},{"role":"user","content":"x"},{"role":"assistant","content":null},` + use("a") + `,` + res("a", "") + `,` + use("b") + `,` + res("b", `,{"type":"text","text":"next"}`) + `]}`, 1},
		{"text before results", `{"messages":[` + use("a") + `,{"role":"user","content":[{"type":"text","text":"hi"},{"type":"tool_result","tool_use_id":"a","content":` + big + `}]},` + use("b") + `,` + res("b", "") + `]}`, 1},
		{"unanswered tool_use", `{"messages":[` + use("a") + `,{"role":"user","content":"no result"},` + use("b") + `,` + res("b", "") + `,` + use("c") + `,` + res("c", "") + `]}`, 1},
		{"type not string", `{"messages":[{"role":"user","content":[{"type":1,"content":` + big + `},{"type":null,"content":` + big + `}]}]}`, 0},
		{"role missing", `{"messages":[{"content":[{"type":"tool_result","tool_use_id":"a","content":` + big + `},{"type":"tool_result","tool_use_id":"a","content":` + big + `}]}]}`, 0},
		{"system null", `{"system":null,"messages":[` + use("a") + `,` + res("a", "") + `,` + use("b") + `,` + res("b", "") + `]}`, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCompiler(t, compiler.Options{}, compilertest.NewMemStore(), nil)
			body := []byte(tt.body)
			r := compileAt(c, messagesPath, "t", body)
			if r.Receipts != tt.receipts {
				t.Fatalf("%d receipts (%s/%s), want %d", r.Receipts, r.Decision, r.Reason, tt.receipts)
			}
			assertValidRewrite(t, messagesPath, body, r)
		})
	}
}

func TestFormatForAllFormats(t *testing.T) {
	tests := []struct {
		path string
		want provider.Format
	}{
		{"/v1/chat/completions", "openai_chat"},
		{"/v1/responses", "openai_responses"},
		{"/openai/v1/responses/", "openai_responses"},
		{"/v1/messages", "anthropic_messages"},
		{"/anthropic/v1/messages", "anthropic_messages"},
		{"/v1/messages/count_tokens", ""},
		{"/v1/messages/batches", ""},
		{"/v1/responses/resp_1/cancel", ""},
		{"/v1/responses/compact", ""},
	}
	for _, tt := range tests {
		got, ok := compiler.FormatFor("POST", tt.path)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("FormatFor(%s) = %q %v, want %q", tt.path, got, ok, tt.want)
		}
	}
}
