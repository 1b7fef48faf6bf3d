package recovery

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

func sse(events ...string) []byte {
	var b strings.Builder
	for _, e := range events {
		name, data, _ := strings.Cut(e, " ")
		if name != "-" {
			b.WriteString("event: " + name + "\n")
		}
		b.WriteString("data: " + data + "\n\n")
	}
	return []byte(b.String())
}

// TestStitcherAnswerShapes: the answer a streamed round assembles keeps
// what the provider needs back (thinking with its signature, redacted
// thinking as sent, the whole tool input), and odd but valid stream shapes
// still make one well-formed client stream.
func TestStitcherAnswerShapes(t *testing.T) {
	cases := []struct {
		name, format provider.Format
		stream       []byte
		answer       string // the round's assembled answer
	}{
		{"anthropic thinking, redacted thinking, our call", provider.Anthropic, sse(
			`message_start {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":5,"output_tokens":1}}}`,
			`content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
			`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"I need "}}`,
			`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"the \"log\"."}}`,
			`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCkYIAxgC"}}`,
			`content_block_stop {"type":"content_block_stop","index":0}`,
			`content_block_start {"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"EmwKAhgBEgy3"}}`,
			`content_block_stop {"type":"content_block_stop","index":1}`,
			`content_block_start {"type":"content_block_start","index":3,"content_block":{"type":"text","text":"","citations":[]}}`,
			`content_block_delta {"type":"content_block_delta","index":3,"delta":{"type":"citations_delta","citation":{"type":"char_location","cited_text":"x","document_index":0}}}`,
			`content_block_delta {"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"As the log says,"}}`,
			`content_block_stop {"type":"content_block_stop","index":3}`,
			`content_block_start {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"own1","name":"token_terminator","input":{}}}`,
			`content_block_delta {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"action\":\"artifact_search\","}}`,
			`content_block_delta {"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"query\":\"log\"}"}}`,
			`content_block_stop {"type":"content_block_stop","index":2}`,
			`message_delta {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":9}}`,
			`message_stop {"type":"message_stop"}`),
			`{"role":"assistant","content":[{"type":"thinking","thinking":"I need the \"log\".","signature":"EqQBCkYIAxgC"},` +
				`{"type":"redacted_thinking","data":"EmwKAhgBEgy3"},` +
				`{"type":"text","text":"As the log says,","citations":[{"type":"char_location","cited_text":"x","document_index":0}]},` +
				`{"type":"tool_use","id":"own1","name":"token_terminator","input":{"action":"artifact_search","query":"log"}}]}`},
		{"chat: text beside a call, finish on the last call chunk", provider.Chat, sse(
			`- {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"Hm. "},"finish_reason":null}]}`,
			`- {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Let me look.","tool_calls":[{"index":0,"id":"own1","type":"function","function":{"name":"token_terminator","arguments":"{\"action\":"}}]},"finish_reason":null}]}`,
			`- {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"artifact_search\",\"query\":\"log\"}"}}]},"finish_reason":"tool_calls"}]}`,
			`- [DONE]`),
			`{"choices":[{"index":0,"message":{"role":"assistant","content":"Hm. Let me look.","tool_calls":[{"id":"own1","type":"function","function":{"name":"token_terminator","arguments":"{\"action\":\"artifact_search\",\"query\":\"log\"}"}}]}}]}`},
	}
	for _, c := range cases {
		t.Run(string(c.name), func(t *testing.T) {
			var client bytes.Buffer
			st, _ := NewStitcher(c.format, &client, Config{})
			st.Write(c.stream)
			r, err := st.EndRound()
			if err != nil || !r.Continue || len(r.Calls) != 1 || string(r.Calls[0].Args) != `{"action":"artifact_search","query":"log"}` {
				t.Fatalf("round: %v %+v", err, r)
			}
			if string(r.Answer) != c.answer {
				t.Fatalf("answer\n got %s\nwant %s", r.Answer, c.answer)
			}
			if !json.Valid(r.Answer) {
				t.Fatal("answer is not JSON")
			}
			// The follow-up fails (say): the client still gets a whole answer.
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			checkWellFormed(t, c.format, client.Bytes())
			if c.format == provider.Chat && !strings.Contains(client.String(), `"content":"Let me look."`) {
				t.Fatalf("text beside the call is lost:\n%s", client.String())
			}
			if c.format == provider.Chat && !strings.Contains(client.String(), `"finish_reason":"stop"`) {
				t.Fatalf("finish reason not made consistent:\n%s", client.String())
			}
		})
	}
}
