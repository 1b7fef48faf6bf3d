package recovery

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// insertedOnly reports whether out is in with bytes inserted at one place.
func insertedOnly(in, out []byte) bool {
	p := 0
	for p < len(in) && in[p] == out[p] {
		p++
	}
	s := 0
	for s < len(in)-p && in[len(in)-1-s] == out[len(out)-1-s] {
		s++
	}
	return p+s == len(in) && len(out) > len(in)
}

// tail decodes the last n entries of a request's messages or input.
func tail(t *testing.T, format provider.Format, body []byte, n int) []map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("follow-up is not JSON: %v\n%s", err, body)
	}
	key := "messages"
	if format == provider.Responses {
		key = "input"
	}
	list, _ := v[key].([]any)
	if len(list) < n {
		t.Fatalf("%d entries", len(list))
	}
	out := make([]map[string]any, n)
	for i, e := range list[len(list)-n:] {
		out[i], _ = e.(map[string]any)
	}
	return out
}

func field(m any, path ...string) any {
	for _, k := range path {
		mm, _ := m.(map[string]any)
		m = mm[k]
	}
	return m
}

func types(list any, key string) []string {
	var out []string
	for _, e := range list.([]any) {
		out = append(out, field(e, key).(string))
	}
	return out
}

func TestFollowUp(t *testing.T) {
	const result = `{"artifact_id":"a_1","content":"line \"1\"\n","offset":0,"next_offset":null}`
	calls := []Call{{ID: "own1", Result: []byte(result)}}
	for _, format := range allFormats {
		for _, mixed := range []bool{false, true} {
			req := []byte(requests[format])
			out, err := FollowUp(format, req, []byte(answers[format](mixed, "")), calls)
			if err != nil {
				t.Fatalf("%s mixed=%v: %v", format, mixed, err)
			}
			if !insertedOnly(req, out) {
				t.Fatalf("%s: the request's bytes must be kept, turn appended:\n%s", format, out)
			}
			switch format {
			case provider.Chat:
				m := tail(t, format, out, 2)
				if m[0]["role"] != "assistant" || len(m[0]["tool_calls"].([]any)) != 1 || field(m[0]["tool_calls"].([]any)[0], "id") != "own1" ||
					m[1]["role"] != "tool" || m[1]["tool_call_id"] != "own1" || m[1]["content"] != result {
					t.Fatalf("chat turn %v", m)
				}
			case provider.Responses:
				m := tail(t, format, out, 3)
				if m[0]["type"] != "reasoning" || m[0]["encrypted_content"] != "gAAAAB==" || m[1]["call_id"] != "own1" ||
					m[2]["type"] != "function_call_output" || m[2]["call_id"] != "own1" || m[2]["output"] != result {
					t.Fatalf("responses items %v", m)
				}
			case provider.Anthropic:
				m := tail(t, format, out, 2)
				if m[0]["role"] != "assistant" || !reflect.DeepEqual(types(m[0]["content"], "type"), []string{"thinking", "text", "tool_use"}) ||
					field(m[0]["content"].([]any)[0], "signature") != "EqQBCkYIAxgCIkD" ||
					m[1]["role"] != "user" || !reflect.DeepEqual(types(m[1]["content"], "tool_use_id"), []string{"own1"}) ||
					field(m[1]["content"].([]any)[0], "content") != result {
					t.Fatalf("anthropic turn %v", m)
				}
			}
		}
	}
}

func TestFollowUpResponsesStringInput(t *testing.T) {
	req := []byte(`{"model":"gpt-5","input":"What did the log say?","store":false}`)
	out, err := FollowUp(provider.Responses, req, []byte(responsesAnswer(false, "")), []Call{{ID: "own1", Result: []byte(`{}`)}})
	if err != nil {
		t.Fatal(err)
	}
	m := tail(t, provider.Responses, out, 4)
	if m[0]["role"] != "user" || m[0]["content"] != "What did the log say?" || m[3]["type"] != "function_call_output" {
		t.Fatalf("%s", out)
	}
}

func TestFollowUpErrors(t *testing.T) {
	good := []Call{{ID: "own1", Result: []byte(`{}`)}}
	for _, format := range allFormats {
		req, ans := []byte(requests[format]), []byte(answers[format](true, ""))
		cases := []struct {
			name     string
			req, ans []byte
			calls    []Call
			err      error
		}{
			{"no own calls", req, []byte(answers[format](false, "done")), good, ErrNoOwnCalls},
			{"missing result", req, ans, []Call{{ID: "other", Result: []byte(`{}`)}}, nil},
			{"request not JSON", []byte(`{"messages":`), ans, good, ErrShape},
			{"answer not JSON", req, []byte(`<html>`), good, ErrShape},
			{"request without messages", []byte(`{"model":"x"}`), ans, good, ErrShape},
		}
		for _, c := range cases {
			out, err := FollowUp(format, c.req, c.ans, c.calls)
			if err == nil || out != nil || (c.err != nil && !errors.Is(err, c.err)) {
				t.Fatalf("%s %s: %v %s", format, c.name, err, out)
			}
		}
	}
}

// TestFollowUpReasoningGoesWithItsCall: a reasoning item right before a
// client call is dropped with it; one before our call stays.
func TestFollowUpReasoningGoesWithItsCall(t *testing.T) {
	answer := `{"output":[{"id":"rs_a","type":"reasoning","summary":[]},{"id":"fc_c","type":"function_call","call_id":"client1","name":"bash","arguments":"{}"},` +
		`{"id":"rs_b","type":"reasoning","summary":[]},{"id":"fc_o","type":"function_call","call_id":"own1","name":"token_terminator","arguments":"{}"}]}`
	out, err := FollowUp(provider.Responses, []byte(requests[provider.Responses]), []byte(answer), []Call{{ID: "own1", Result: []byte(`{}`)}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []any
	for _, it := range tail(t, provider.Responses, out, 4) {
		ids = append(ids, it["id"])
	}
	// The request's last item (no id), then what the answer keeps.
	if !reflect.DeepEqual(ids, []any{nil, "rs_b", "fc_o", nil}) {
		t.Fatalf("appended items %v", ids)
	}
}

func TestFollowUpAnthropicErrorResult(t *testing.T) {
	res := errorJSON(errNotFound)
	out, err := FollowUp(provider.Anthropic, []byte(requests[provider.Anthropic]), []byte(anthropicAnswer(false, "")), []Call{{ID: "own1", Result: res}})
	if err != nil {
		t.Fatal(err)
	}
	m := tail(t, provider.Anthropic, out, 1)
	if r := m[0]["content"].([]any)[0].(map[string]any); r["is_error"] != true || r["content"] != string(res) {
		t.Fatalf("%v", r)
	}
}
