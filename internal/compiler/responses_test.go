package compiler_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

func TestResponsesDuplicates(t *testing.T) {
	out := fixtures.ToolOutput(1, 9000)
	turns := []fixtures.ChatTurn{
		{Tool: "shell", Args: `{"cmd":"cat a.py"}`, Output: out},
		{Tool: "apply_patch", Args: `{}`, Output: fixtures.ToolOutput(2, 9000)},
		{Tool: "shell", Args: `{"cmd":"cat a.py"}`, Output: out},
	}
	for _, o := range []fixtures.ResponsesOptions{{}, {Reasoning: true}, {PartsOutput: true}, {Reasoning: true, PartsOutput: true}} {
		body := fixtures.ResponsesBody("gpt-5", turns, "go on", o)
		store := compilertest.NewMemStore()
		c := newCompiler(t, compiler.Options{}, store, nil)
		res := compileAt(c, responsesPath, "t1", body)
		if res.Decision != compiler.Accepted || res.Receipts != 1 || res.Format != "openai_responses" {
			t.Fatalf("%+v: %s/%s receipts %d format %s", o, res.Decision, res.Reason, res.Receipts, res.Format)
		}
		assertValidRewrite(t, responsesPath, body, res)
		items := decode(t, res.Body)["input"].([]any)
		var outs []any
		for _, it := range items {
			if m := it.(map[string]any); m["type"] == "function_call_output" {
				outs = append(outs, m["output"])
			}
		}
		if s, _ := outs[0].(string); !strings.HasPrefix(s, artifact.ReceiptPrefix) || !strings.Contains(s, "tool=shell") {
			t.Fatalf("older copy not receipted: %.80q", s)
		}
		if outs[2] == outs[0] {
			t.Fatalf("newest copy changed")
		}
		d := storedDigest(store, "t1", out)
		a, ok, _ := store.Get(t.Context(), "t1", d)
		if !ok || a.Text != out || a.Tool != "shell" || a.Args != `{"cmd":"cat a.py"}` {
			t.Fatalf("artifact not stored with provenance: ok=%v tool=%q args=%q", ok, a.Tool, a.Args)
		}
	}
}

func TestResponsesLeasesRetryTenants(t *testing.T) {
	turns := fixtures.Turns(10, 3, 9000)
	o := fixtures.ResponsesOptions{Reasoning: true}
	steps := [][]byte{
		fixtures.ResponsesBody("gpt-5", turns[:1], "", o),
		fixtures.ResponsesBody("gpt-5", turns[:2], "", o),
		fixtures.ResponsesBody("gpt-5", turns[:3], "", o),
	}
	c := newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
	for i, body := range steps {
		res := compileAt(c, responsesPath, "A", body)
		if res.Receipts != i {
			t.Fatalf("step %d: %d receipts (%s/%s), want %d", i+1, res.Receipts, res.Decision, res.Reason, i)
		}
		assertValidRewrite(t, responsesPath, body, res)
		if again := compileAt(c, responsesPath, "A", body); !bytes.Equal(again.Body, res.Body) {
			t.Fatalf("step %d: retry compiled differently", i+1)
		}
	}
	// Another tenant, and other instructions (another agent), start afresh.
	if res := compileAt(c, responsesPath, "B", steps[1]); res.Receipts != 0 {
		t.Fatalf("tenant B consumed tenant A's lease")
	}
	other := fixtures.ResponsesBody("gpt-5", turns[:2], "", fixtures.ResponsesOptions{Reasoning: true, Instructions: "You write docs."})
	if res := compileAt(c, responsesPath, "A", other); res.Receipts != 0 {
		t.Fatalf("other instructions share the lineage")
	}
}

// A hand-written body with everything the format must leave alone: odd
// spacing and escapes, reasoning with encrypted_content, a compaction item,
// custom tool calls, item ids, output parts, unknown fields and items, and
// a large duplicate outside input.
func TestResponsesBytePreservationAndNeverTouch(t *testing.T) {
	out := fixtures.ToolOutput(40, 8500)
	big := jstr(out)
	enc := `"gAAAAB` + strings.Repeat("Zm9vYmFy", 1200) + `=="`
	reasoning := `{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"Looking \u00e9"}],"encrypted_content":` + enc + `}`
	compaction := `{"type":"compaction","id":"cmp_1","encrypted_content":` + enc + `}`
	image := `{"type":"function_call_output","call_id":"call.img:1","output":[{"type":"input_text","text":` + big + `},{"type":"input_image","image_url":"data:image/png;base64,AAAA"}]}`
	body := []byte(`{ "model" : "gpt-5", "instructions":` + big + `,` +
		"\n \"input\" : [\n" +
		`  {"role":"user","content":` + big + `},` +
		`  ` + compaction + `,` +
		`  ` + reasoning + `,` +
		`  {"type":"function_call","id":"fc_1","call_id":"functions.shell:0","name":"shell","arguments":"{\"cmd\":[\"cat\"]}","status":"completed"},` +
		`  {"type":"function_call_output","id":"fco_1","call_id":"functions.shell:0","output":` + big + `, "status" : "completed"},` +
		`  {"type":"custom_tool_call","id":"ctc_1","call_id":"c:1","name":"apply_patch","input":"*** Begin Patch"},` +
		`  {"type":"custom_tool_call_output","call_id":"c:1","output":` + big + `},` +
		`  {"type":"mystery_item","payload":` + big + `},` +
		`  ` + image + `,` +
		`  {"type":"function_call","call_id":"functions.shell:0","name":"shell","arguments":"{}"},` +
		`  {"type":"function_call_output","call_id":"functions.shell:0","output":` + big + `}` +
		"\n ], \"temperature\": 1.0E0, \"store\": false, \"metadata\": {\"output\": " + big + "} }")
	store := compilertest.NewMemStore()
	c := newCompiler(t, compiler.Options{}, store, nil)
	res := compileAt(c, responsesPath, "t", body)
	if res.Decision != compiler.Accepted || res.Receipts != 2 {
		t.Fatalf("got %s/%s receipts=%d", res.Decision, res.Reason, res.Receipts)
	}
	assertValidRewrite(t, responsesPath, body, res)
	for _, keep := range []string{reasoning, compaction, image, `"instructions":` + big, `"metadata": {"output": ` + big + `}`,
		`{"role":"user","content":` + big + `}`, `{"type":"mystery_item","payload":` + big + `}`,
		`, "status" : "completed"}`, `"id":"fco_1"`} {
		if !bytes.Contains(res.Body, []byte(keep)) {
			t.Fatalf("never-touch region changed: %.80q", keep)
		}
	}
	// The newest copy stays inline; the two older slots became receipts.
	if !bytes.HasSuffix(res.Body, []byte(`"output":`+big+"}\n ], \"temperature\": 1.0E0, \"store\": false, \"metadata\": {\"output\": "+big+"} }")) {
		t.Fatalf("newest copy not inline")
	}
	if r := receipts(t, res.Body); !strings.Contains(r[0], "tool=shell") || !strings.Contains(r[1], "tool=apply_patch") {
		t.Fatalf("receipts %q", r)
	}
}

func TestResponsesPassThrough(t *testing.T) {
	big := jstr(strings.Repeat("x", 9000))
	tests := []struct {
		name, body string
		reason     compiler.Reason
	}{
		{"input string", `{"model":"gpt-5","input":` + big + `}`, "no_candidates"},
		{"input missing", `{"model":"gpt-5"}`, "unknown_shape"},
		{"input object", `{"input":{"a":1}}`, "unknown_shape"},
		{"item not object", `{"input":[1]}`, "unknown_shape"},
		{"top-level array", `[]`, "unknown_shape"},
		{"empty input", `{"input":[]}`, "no_candidates"},
		{"output null", `{"input":[{"type":"function_call_output","call_id":"a","output":null}]}`, "no_candidates"},
		{"output odd", `{"input":[{"type":"function_call_output","call_id":"a","output":{"text":` + big + `}},{"type":"function_call_output","call_id":"b","output":7}]}`, "no_candidates"},
		{"output with image", `{"input":[{"type":"function_call_output","call_id":"a","output":[{"type":"input_image","image_url":"x"}]}]}`, "no_candidates"},
		{"only one large output", `{"input":[{"type":"function_call_output","call_id":"unknown","output":` + big + `}]}`, "nothing_to_replace"},
		{"invalid json", `{"input":[`, "invalid_json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCompiler(t, compiler.Options{}, compilertest.NewMemStore(), nil)
			body := []byte(tt.body)
			res := compileAt(c, responsesPath, "t", body)
			if res.Decision != compiler.Passthrough || res.Reason != tt.reason {
				t.Fatalf("got %s/%s, want passthrough/%s", res.Decision, res.Reason, tt.reason)
			}
			if !bytes.Equal(res.Body, body) || (len(body) > 0 && &res.Body[0] != &body[0]) {
				t.Fatalf("pass-through is not the original slice")
			}
		})
	}
}

// With previous_response_id the history is at the provider: only input is
// compiled, and outputs whose calls are not in the request still work.
func TestResponsesPreviousResponseID(t *testing.T) {
	out := fixtures.ToolOutput(7, 9000)
	body := []byte(`{"model":"gpt-5","previous_response_id":"resp_abc","input":[` +
		`{"type":"function_call_output","call_id":"call_1","output":` + jstr(out) + `},` +
		`{"type":"function_call_output","call_id":"call_2","output":` + jstr(out) + `}]}`)
	c := newCompiler(t, compiler.Options{}, compilertest.NewMemStore(), nil)
	res := compileAt(c, responsesPath, "t", body)
	if res.Decision != compiler.Accepted || res.Receipts != 1 {
		t.Fatalf("got %s/%s receipts=%d", res.Decision, res.Reason, res.Receipts)
	}
	assertValidRewrite(t, responsesPath, body, res)
	if !bytes.HasPrefix(res.Body, []byte(`{"model":"gpt-5","previous_response_id":"resp_abc","input":[`)) {
		t.Fatalf("outside input changed")
	}
	// The same input after another previous response is another lineage.
	c = newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
	one := []byte(`{"previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"c","output":` + jstr(out) + `}]}`)
	two := []byte(`{"previous_response_id":"resp_2","input":[{"type":"function_call_output","call_id":"c","output":` + jstr(out) + `},{"role":"user","content":"more"}]}`)
	compileAt(c, responsesPath, "t", one)
	if res := compileAt(c, responsesPath, "t", two); res.Receipts != 0 {
		t.Fatalf("another previous_response_id consumed the lease")
	}
}

// Bad input: each compiles validly or passes through byte-identical.
func TestResponsesBadInput(t *testing.T) {
	big := jstr(fixtures.ToolOutput(9, 9000))
	tests := []struct {
		name     string
		body     string
		receipts int
	}{
		{"unknown item types", `{"input":[{"type":"web_search_call","id":"ws_1","action":{"q":` + big + `}},{"type":"function_call_output","call_id":"a","output":` + big + `},{"type":"future_item"},{"type":"function_call_output","call_id":"b","output":` + big + `}]}`, 1},
		{"output null beside dup", `{"input":[{"type":"function_call","call_id":"a","name":"x","arguments":"{}"},{"type":"function_call_output","call_id":"a","output":null},{"type":"function_call_output","call_id":"a","output":` + big + `},{"type":"function_call_output","call_id":"a","output":` + big + `}]}`, 1},
		{"unknown call id", `{"input":[{"type":"function_call_output","call_id":"nope","output":` + big + `},{"type":"function_call_output","call_id":"nope2","output":` + big + `}]}`, 1},
		{"ids with dot and colon reused", `{"input":[{"type":"function_call","call_id":"functions.bash:0","name":"bash","arguments":"{}"},{"type":"function_call_output","call_id":"functions.bash:0","output":` + big + `},{"type":"function_call","call_id":"functions.bash:0","name":"bash","arguments":"{}"},{"type":"function_call_output","call_id":"functions.bash:0","output":` + big + `}]}`, 1},
		{"assistant content empty and null", `{"input":[{"role":"assistant","content":""},{"type":"function_call","call_id":"a","name":"x","arguments":""},{"type":"function_call_output","call_id":"a","output":` + big + `},{"role":"assistant","content":null},{"type":"function_call","call_id":"b","name":"x","arguments":null},{"type":"function_call_output","call_id":"b","output":` + big + `}]}`, 1},
		{"call_id missing or not string", `{"input":[{"type":"function_call_output","output":` + big + `},{"type":"function_call_output","call_id":5,"output":` + big + `}]}`, 1},
		{"type not string", `{"input":[{"type":5,"output":` + big + `},{"type":null,"output":` + big + `}]}`, 0},
		{"reasoning last", `{"input":[{"type":"function_call_output","call_id":"a","output":` + big + `},{"type":"function_call_output","call_id":"a","output":` + big + `},{"type":"reasoning","id":"rs","encrypted_content":"x"}]}`, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCompiler(t, compiler.Options{}, compilertest.NewMemStore(), nil)
			body := []byte(tt.body)
			res := compileAt(c, responsesPath, "t", body)
			if res.Receipts != tt.receipts {
				t.Fatalf("%d receipts (%s/%s), want %d", res.Receipts, res.Decision, res.Reason, tt.receipts)
			}
			assertValidRewrite(t, responsesPath, body, res)
		})
	}
}
