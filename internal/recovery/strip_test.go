package recovery

import (
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
)

func TestStripOwnCalls(t *testing.T) {
	sum := provider.Usage{Input: 2400, Output: 75, CacheRead: 1000, CacheWrite: 700, Known: true}
	cases := []struct {
		name   string
		format provider.Format
		answer string
		usage  provider.Usage
		want   string
	}{
		{"chat, only ours: tool_calls gone, stop", provider.Chat, chatAnswer(false, ""), sum,
			`{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":null},"finish_reason":"stop"}],` +
				`"usage":{"prompt_tokens":2400,"completion_tokens":75,"total_tokens":2475,"prompt_tokens_details":{"cached_tokens":1000}}}`},
		{"chat, mixed: the client's call stays", provider.Chat, chatAnswer(true, ""), provider.Usage{},
			`{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[` +
				`{"id":"client1","type":"function","function":{"name":"bash","arguments":"{\"cmd\":\"ls\"}"}}]},"finish_reason":"tool_calls"}],` +
				`"usage":{"prompt_tokens":800,"completion_tokens":30,"total_tokens":830,"prompt_tokens_details":{"cached_tokens":0}}}`},
		{"responses, only ours: its reasoning goes too", provider.Responses, responsesAnswer(false, ""), sum,
			`{"id":"resp_1","object":"response","status":"completed","output":[],` +
				`"usage":{"input_tokens":2400,"input_tokens_details":{"cached_tokens":1000},"output_tokens":75,"output_tokens_details":{"reasoning_tokens":10},"total_tokens":2475}}`},
		{"anthropic, only ours: end_turn", provider.Anthropic, anthropicAnswer(false, ""), sum,
			`{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"thinking","thinking":"Need the log.","signature":"EqQBCkYIAxgCIkD"},{"type":"text","text":"Reading it."}],` +
				`"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":700,"cache_creation_input_tokens":700,"cache_read_input_tokens":1000,"output_tokens":75}}`},
		{"anthropic, mixed: tool_use stays", provider.Anthropic, anthropicAnswer(true, ""), provider.Usage{},
			strings.Replace(anthropicAnswer(true, ""), `,{"type":"tool_use","id":"own1","name":"token_terminator","input":`+ownArgs+`}`, "", 1)},
		{"final text answer, usage summed", provider.Anthropic, anthropicAnswer(false, "It said OK."), sum,
			strings.Replace(anthropicAnswer(false, "It said OK."), `"input_tokens":50,"cache_creation_input_tokens":700,"cache_read_input_tokens":50,"output_tokens":30`,
				`"input_tokens":700,"cache_creation_input_tokens":700,"cache_read_input_tokens":1000,"output_tokens":75`, 1)},
		{"nothing to do: same bytes", provider.Chat, chatAnswer(false, "fine"), provider.Usage{}, chatAnswer(false, "fine")},
	}
	for _, c := range cases {
		got, err := StripOwnCalls(c.format, []byte(c.answer), c.usage)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(got) != c.want {
			t.Fatalf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
		// What the client gets reads back with the summed usage and
		// without our calls.
		r := response.NewReader(c.format, response.Options{Keep: []string{ToolName}})
		r.Write(got)
		want := c.usage
		if c.format != provider.Anthropic {
			want.CacheWrite = 0 // OpenAI reports no cache writes
		}
		if c.usage.Known && sums(r.Usage()) != want {
			t.Fatalf("%s: usage reads %+v", c.name, r.Usage())
		}
		if len(OwnCalls(r.ToolCalls())) != 0 {
			t.Fatalf("%s: our call left in", c.name)
		}
	}
	if _, err := StripOwnCalls(provider.Chat, []byte(`nope`), sum); err == nil {
		t.Fatal("an answer that is not JSON is an error")
	}
}
