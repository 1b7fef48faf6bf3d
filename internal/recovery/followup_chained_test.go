package recovery

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestFollowUpChained(t *testing.T) {
	request := `{"type":"response.create","model":"m","store":false,"previous_response_id":"resp_old","input":[{"role":"user","content":"hi"}],"tools":[{"type":"function","name":"token_terminator"}]}`
	own := `{"type":"function_call","call_id":"call_own","name":"token_terminator","arguments":"{}"}`
	client := `{"type":"function_call","call_id":"call_cli","name":"shell","arguments":"{}"}`
	custom := `{"type":"custom_tool_call","call_id":"call_patch","name":"apply_patch","input":"x"}`
	reasoning := `{"type":"reasoning","id":"rs_1","summary":[]}`
	calls := []Call{{ID: "call_own", Result: []byte(`{"text":"a \"quoted\" line"}`)}}
	type item struct {
		Type   string `json:"type"`
		CallID string `json:"call_id"`
		Output string `json:"output"`
	}
	for _, tc := range []struct {
		name    string
		request string
		answer  string
		want    []item
		err     error
	}{
		{"our call only", request, `{"output":[` + reasoning + `,` + own + `]}`,
			[]item{{"function_call_output", "call_own", `{"text":"a \"quoted\" line"}`}}, nil},
		{"with the client's calls: each answered", request, `{"output":[` + client + `,` + own + `,` + custom + `]}`,
			[]item{{"function_call_output", "call_cli", notRunOutput}, {"function_call_output", "call_own", `{"text":"a \"quoted\" line"}`},
				{"custom_tool_call_output", "call_patch", notRunOutput}}, nil},
		{"a request without previous_response_id gets one", `{"type":"response.create","input":"hi"}`, `{"output":[` + own + `]}`,
			[]item{{"function_call_output", "call_own", `{"text":"a \"quoted\" line"}`}}, nil},
		{"no call of ours", request, `{"output":[` + client + `]}`, nil, ErrNoOwnCalls},
		{"an answer without output", request, `{}`, nil, ErrShape},
	} {
		out, err := FollowUpChained([]byte(tc.request), "resp_round", []byte(tc.answer), calls)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%s: err %v, want %v", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%s: %v in %s", tc.name, err, out)
		}
		var prev string
		var input []item
		json.Unmarshal(got["previous_response_id"], &prev)
		json.Unmarshal(got["input"], &input)
		if prev != "resp_round" || len(input) != len(tc.want) {
			t.Fatalf("%s: previous %q, input %+v", tc.name, prev, input)
		}
		for i := range input {
			if input[i] != tc.want[i] {
				t.Errorf("%s: input %d = %+v, want %+v", tc.name, i, input[i], tc.want[i])
			}
		}
		var orig map[string]json.RawMessage
		json.Unmarshal([]byte(tc.request), &orig)
		for k, v := range orig { // every other member byte for byte
			if k != "input" && k != "previous_response_id" && string(got[k]) != string(v) {
				t.Errorf("%s: member %s changed: %s", tc.name, k, got[k])
			}
		}
	}
}
