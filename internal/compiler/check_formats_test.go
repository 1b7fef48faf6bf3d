package compiler

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
)

// The format checks on their own (without sameExcept in front of them):
// every provider rule the issue names must be caught when broken, and a
// rewrite that only replaces slot contents must pass.
func TestFormatChecks(t *testing.T) {
	anth := `{"system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}],"tools":[{"name":"Read"}],"messages":[` +
		`{"role":"user","content":"go"},` +
		`{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"SIG"},{"type":"redacted_thinking","data":"RED"},{"type":"server_tool_use","id":"srv","name":"web_search","input":{}},{"type":"web_search_tool_result","tool_use_id":"srv","content":[]},{"type":"tool_use","id":"t1","name":"Read","input":{}},{"type":"tool_use","id":"t2","name":"Read","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","is_error":true,"content":"OUT1"},{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"OUT2"}],"cache_control":{"type":"ephemeral"}},{"type":"text","text":"next"}]}]}`
	anth4 := strings.Replace(strings.Replace(anth, `{"name":"Read"}`, `{"name":"Read","cache_control":{"type":"ephemeral"}}`, 1),
		`"content":"go"`, `"content":[{"type":"text","text":"go","cache_control":{"type":"ephemeral"}}]`, 1)
	anth1h := strings.Replace(anth, `"text":"sys","cache_control":{"type":"ephemeral"}`, `"text":"sys","cache_control":{"type":"ephemeral","ttl":"1h"}`, 1)
	resp := `{"instructions":"be good","input":[{"role":"user","content":"go"},` +
		`{"type":"compaction","id":"cmp","encrypted_content":"CMP"},` +
		`{"type":"reasoning","id":"rs_1","encrypted_content":"ENC"},` +
		`{"type":"function_call","id":"fc_1","call_id":"c1","name":"shell","arguments":"{}"},` +
		`{"type":"function_call_output","call_id":"c1","output":"OUT1"},` +
		`{"type":"custom_tool_call","call_id":"c2","name":"patch","input":"x"},` +
		`{"type":"custom_tool_call_output","call_id":"c2","output":[{"type":"input_text","text":"OUT2"}]}]}`
	tests := []struct {
		name    string
		f       format
		orig    string
		from    string // replaced once in orig to make out
		to      string
		wantErr string
	}{
		{"anthropic string slot", anthropicFormat{}, anth, `"OUT1"`, `"receipt"`, ""},
		{"anthropic list slot", anthropicFormat{}, anth, `[{"type":"text","text":"OUT2"}]`, `"receipt"`, ""},
		{"thinking signature", anthropicFormat{}, anth, `"SIG"`, `"SIH"`, "block 0 changed"},
		{"redacted thinking", anthropicFormat{}, anth, `"RED"`, `"REE"`, "block 1 changed"},
		{"server tool use", anthropicFormat{}, anth, `"name":"web_search"`, `"name":"web_fetch"`, "block 2 changed"},
		{"server tool result", anthropicFormat{}, anth, `"content":[]}`, `"content":"x"}`, "block 3 changed"},
		{"is_error", anthropicFormat{}, anth, `"is_error":true`, `"is_error":false`, "is_error changed"},
		{"tool_use_id", anthropicFormat{}, anth, `"tool_use_id":"t1"`, `"tool_use_id":"t3"`, "tool_use_id changed"},
		{"cache_control removed", anthropicFormat{}, anth, `"OUT2"}],"cache_control"`, `"OUT2"}],"cache_contrl"`, "changed keys"},
		{"system", anthropicFormat{}, anth, `"sys"`, `"SYS"`, "system changed"},
		{"tools", anthropicFormat{}, anth, `"name":"Read"}]`, `"name":"Write"}]`, "tools changed"},
		{"text before results", anthropicFormat{}, anth, `{"type":"tool_result","tool_use_id":"t1","is_error":true,"content":"OUT1"}`, `{"type":"text","text":"early"}`, "changed shape"},
		// One breakpoint may be added inside a slot (a receipt breakpoint; its
		// value's shape is sameExcept's to check), within the limit of four,
		// and never next to a 1-hour one.
		{"breakpoint added in a slot", anthropicFormat{}, anth, `[{"type":"text","text":"OUT2"}]`, `[{"type":"text","text":"OUT2","cache_control":{"type":"ephemeral"}}]`, ""},
		{"breakpoint added outside a slot", anthropicFormat{}, anth, `{"type":"text","text":"next"}`, `{"type":"text","text":"next","cache_control":{"type":"ephemeral"}}`, "block 2 changed"},
		{"breakpoint added past a slot's first block", anthropicFormat{}, anth, `[{"type":"text","text":"OUT2"}]`, `[{"type":"text","text":"x"},{"type":"text","text":"y","cache_control":{"type":"ephemeral"}}]`, "outside a receipt"},
		{"breakpoint moved", anthropicFormat{}, anth, `"OUT1"},{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"OUT2"}],"cache_control":{"type":"ephemeral"}}`, `[{"type":"text","text":"r","cache_control":{"type":"ephemeral"}}]},{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"OUT2"}],"cache_contro":{"type":"ephemeral"}}`, "changed keys"},
		{"two breakpoints added", anthropicFormat{}, anth, `"OUT1"},{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"OUT2"}]`, `[{"type":"text","text":"r","cache_control":{"type":"ephemeral"}}]},{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"OUT2","cache_control":{"type":"ephemeral"}}]`, "breakpoints changed (2 -> 4)"},
		{"breakpoint beyond four", anthropicFormat{}, anth4, `"OUT1"`, `[{"type":"text","text":"r","cache_control":{"type":"ephemeral"}}]`, "more than 4"},
		{"breakpoint next to a 1-hour one", anthropicFormat{}, anth1h, `"OUT1"`, `[{"type":"text","text":"r","cache_control":{"type":"ephemeral"}}]`, "1-hour"},
		{"breakpoint added with a 1-hour TTL", anthropicFormat{}, anth, `"OUT1"`, `[{"type":"text","text":"r","cache_control":{"type":"ephemeral","ttl":"1h"}}]`, "outside a receipt"},
		{"responses string slot", responsesFormat{}, resp, `"OUT1"`, `"receipt"`, ""},
		{"responses parts slot", responsesFormat{}, resp, `[{"type":"input_text","text":"OUT2"}]`, `"receipt"`, ""},
		{"encrypted content", responsesFormat{}, resp, `"ENC"`, `"ENX"`, "opaque item 2 changed"},
		{"compaction", responsesFormat{}, resp, `"CMP"`, `"CMX"`, "opaque item 1 changed"},
		{"reasoning loses its item", responsesFormat{}, resp, `{"type":"function_call","id":"fc_1"`, `{"type":"function_call","id":"fc_2"`, "lost its following item"},
		{"call id", responsesFormat{}, resp, `"call_id":"c1","output"`, `"call_id":"c9","output"`, "pairing changed"},
		{"call id spelt with an escape", responsesFormat{}, resp, `"call_id":"c1","output"`, `"call_id":"\u00631","output"`, ""},
		{"output type", responsesFormat{}, resp, `"type":"function_call_output"`, `"type":"custom_tool_call_output"`, "pairing changed"},
		{"call made a message", responsesFormat{}, resp, `{"type":"custom_tool_call","call_id":"c2"`, `{"type":"message","call_id":"c2"`, "pairing changed"},
		{"reasoning's item id spelt with an escape", responsesFormat{}, resp, `"id":"fc_1"`, `"id":"\u0066c_1"`, ""},
		{"reasoning's item role", responsesFormat{}, resp, `{"type":"function_call","id":"fc_1"`, `{"type":"function_call","role":"user","id":"fc_1"`, "lost its following item"},
		{"instructions", responsesFormat{}, resp, `"be good"`, `"be bad"`, "instructions changed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if strings.Count(tt.orig, tt.from) != 1 {
				t.Fatalf("fixture: %q occurs %d times", tt.from, strings.Count(tt.orig, tt.from))
			}
			out := strings.Replace(tt.orig, tt.from, tt.to, 1)
			po, reason := parseDoc(tt.f, []byte(tt.orig), nil)
			if reason != "" {
				t.Fatalf("orig: %s", reason)
			}
			pn, reason := parseDoc(tt.f, []byte(out), nil)
			if reason != "" {
				t.Fatalf("out: %s", reason)
			}
			err := tt.f.check(po.doc, pn.doc)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestAnthropicPairingRules(t *testing.T) {
	use := func(ids ...string) string {
		var b []string
		for _, id := range ids {
			b = append(b, `{"type":"tool_use","id":"`+id+`","name":"x","input":{}}`)
		}
		return `{"role":"assistant","content":[{"type":"text","text":"t"},` + strings.Join(b, ",") + `]}`
	}
	res := func(id string) string { return `{"type":"tool_result","tool_use_id":"` + id + `","content":"r"}` }
	user := func(blocks ...string) string { return `{"role":"user","content":[` + strings.Join(blocks, ",") + `]}` }
	text := `{"type":"text","text":"hi"}`
	tests := []struct {
		name   string
		msgs   string
		paired int
		ok     bool
	}{
		{"paired", user(text) + "," + use("a", "b") + "," + user(res("a"), res("b"), text), 2, true},
		{"reused id across turns", use("a") + "," + user(res("a")) + "," + use("a") + "," + user(res("a")), 2, true},
		{"text first", use("a") + "," + user(text, res("a")), 0, false},
		{"missing result", use("a", "b") + "," + user(res("a")), 0, false},
		{"not immediately after", use("a") + "," + user(text) + "," + user(res("a")), 0, false},
		{"orphan result", user(res("a")), 0, false},
		{"string reply", use("a") + `,{"role":"user","content":"no"}`, 0, false},
		{"duplicate result", use("a") + "," + user(res("a"), res("a")), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := []byte(`{"messages":[` + tt.msgs + `]}`)
			p, reason := parseDoc(anthropicFormat{}, src, nil)
			if reason != "" {
				t.Fatal(reason)
			}
			n, err := anthPairing(src, p.root.Get("messages"))
			if (err == nil) != tt.ok || n != tt.paired {
				t.Fatalf("got %d, %v; want %d, ok=%v", n, err, tt.paired, tt.ok)
			}
		})
	}
}

// The breakpoint rules on one request: at most four, and no 1-hour
// breakpoint after a 5-minute one in render order (tools, system,
// messages), whatever the body's key order (Claude Code sends messages
// first).
func TestAnthropicBreakpointRules(t *testing.T) {
	mark := func(ttl string) string {
		if ttl == "" {
			return `"cache_control":{"type":"ephemeral"},`
		}
		return `"cache_control":{"type":"ephemeral","ttl":"` + ttl + `"},`
	}
	body := func(tools, system string, msgs ...string) string {
		var m []string
		for _, x := range msgs {
			m = append(m, `{"role":"user","content":[{`+x+`"type":"text","text":"hi"}]}`)
		}
		return `{"messages":[` + strings.Join(m, `,{"role":"assistant","content":"ok"},`) + `],` +
			`"tools":[{` + tools + `"name":"a","input_schema":{}}],"system":[{` + system + `"type":"text","text":"s"}]}`
	}
	for _, tt := range []struct {
		name, body, wantErr string
	}{
		{"four", body(mark(""), mark(""), mark(""), mark("")), ""},
		{"five", body(mark(""), mark(""), mark(""), mark(""), mark("")), "more than 4"},
		{"1-hour system before 5-minute messages", body("", mark("1h"), mark("")), ""},
		{"5-minute tools before a 1-hour system", body(mark(""), mark("1h")), "after a 5-minute one"},
		{"a 1-hour message after a 5-minute one", body("", "", mark(""), mark("1h")), "after a 5-minute one"},
		{"all 1-hour", body(mark("1h"), mark("1h"), mark("1h")), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, reason := parseDoc(anthropicFormat{}, []byte(tt.body), nil)
			if reason != "" {
				t.Fatal(reason)
			}
			err := anthropicFormat{}.rules(p.doc)
			if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// breakpointMarks reads markers from the tree: a tool result quoting
// "cache_control" is no marker, an escaped key is one, and the 1-hour TTL
// is seen wherever it is.
func TestBreakpointMarks(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		marked     []bool
		count      int
		oneHour    bool
	}{
		{"quoted in a result", `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"{\"cache_control\":{\"type\":\"ephemeral\"}}"}]}]}`,
			[]bool{false, false}, 0, false},
		{"escaped key", `{"messages":[{"role":"user","content":[{"type":"text","text":"x","cache\u005fcontrol":{"type":"ephemeral"}}]}]}`,
			[]bool{false, true}, 1, false},
		{"tools, system and a 1-hour message", `{"tools":[{"name":"a","cache_control":{"type":"ephemeral"}}],"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],` +
			`"messages":[{"role":"user","content":"go"},{"role":"assistant","content":"ok"},{"role":"user","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}`,
			[]bool{true, true, false, false, true}, 3, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, reason := parseDoc(anthropicFormat{}, []byte(tt.body), nil)
			if reason != "" {
				t.Fatal(reason)
			}
			marked, count, oneHour := breakpointMarks(p.doc)
			if fmt.Sprint(marked) != fmt.Sprint(tt.marked) || count != tt.count || oneHour != tt.oneHour {
				t.Fatalf("marked %v count %d 1h %v; want %v %d %v", marked, count, oneHour, tt.marked, tt.count, tt.oneHour)
			}
		})
	}
}

// cacheBreakpoints renders each marker's own path: siblings share the
// walk's path slots, and a path deeper than its starting stack grows.
func TestCacheBreakpointPaths(t *testing.T) {
	deep := `{"cache_control":{}}`
	want := ""
	for i := range pathDepth + 4 {
		deep = fmt.Sprintf(`{"k%d":%s}`, i, deep)
		want = fmt.Sprintf(`/"k%d"`, i) + want
	}
	tests := []struct {
		name, src string
		want      []string
	}{
		{"siblings", `{"a":[{"b":{"cache_control":{}}},{"c":[1,{"cache_control":{"ttl":"1h"}}]}],"d":{"cache_control":{}}}`,
			[]string{`/"a"/0/"b"`, `/"a"/1/"c"/1`, `/"d"`}},
		{"root and nested", `{"cache_control":{},"x":[[{"cache_control":{}}]]}`, []string{``, `/"x"/0/0`}},
		{"deeper than the stack", deep, []string{want}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, err := jsonv.Parse([]byte(tt.src), 64)
			if err != nil {
				t.Fatal(err)
			}
			var got []breakpoint
			cacheBreakpoints([]byte(tt.src), root, nil, &got)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d markers %v, want %v", len(got), got, tt.want)
			}
			for i, b := range got {
				if b.path != tt.want[i] {
					t.Errorf("marker %d: path %q, want %q", i, b.path, tt.want[i])
				}
			}
		})
	}
}
