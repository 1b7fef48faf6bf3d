package response

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

var keepOurs = []string{"token_terminator"}

// wantCalls is what every fixture holds: the gateway's call with its
// arguments kept, then a client call reduced to id and name.
func wantCalls(ours, theirs string) []ToolCall {
	return []ToolCall{{ID: ours, Name: "token_terminator", Arguments: []byte(argsGet)}, {ID: theirs, Name: "bash"}}
}

type readerCase struct {
	name   string
	format provider.Format
	stream bool
	input  string
	usage  provider.Usage
	calls  []ToolCall
}

var readerCases = []readerCase{
	{"chat body", provider.Chat, false, chatBodyFixture,
		provider.Usage{Input: 1850, Output: 41, CacheRead: 1536, Model: "gpt-4o-2024-08-06", Known: true}, wantCalls("call_tt1", "call_bash")},
	{"chat stream crlf", provider.Chat, true, chatStreamFixture,
		provider.Usage{Input: 1850, Output: 41, CacheRead: 1536, Model: "gpt-4o", Known: true}, wantCalls("call_tt1", "call_bash")},
	{"responses body", provider.Responses, false, responsesBodyFixture,
		provider.Usage{Input: 2100, Output: 77, CacheRead: 1920, Model: "gpt-5", Known: true}, wantCalls("call_tt1", "call_bash")},
	{"responses stream", provider.Responses, true, responsesStreamFixture,
		provider.Usage{Input: 2100, Output: 77, CacheRead: 1920, Known: true}, wantCalls("call_tt1", "call_bash")},
	{"anthropic body", provider.Anthropic, false, anthropicBodyFixture,
		provider.Usage{Input: 4312, Output: 95, CacheRead: 4000, CacheWrite: 300, Model: "claude-sonnet-4-5", Known: true}, wantCalls("toolu_tt1", "toolu_bash")},
	{"anthropic stream", provider.Anthropic, true, anthropicStreamFixture,
		provider.Usage{Input: 4312, Output: 95, CacheRead: 4000, CacheWrite: 300, Model: "claude-sonnet-4-5", Known: true}, wantCalls("toolu_tt1", "toolu_bash")},
	{"anthropic stream newer message_delta usage", provider.Anthropic, true, strings.Replace(anthropicStreamFixture,
		`"usage":{"output_tokens":95}`, `"usage":{"input_tokens":12,"cache_creation_input_tokens":300,"cache_read_input_tokens":4100,"output_tokens":95}`, 1),
		provider.Usage{Input: 4412, Output: 95, CacheRead: 4100, CacheWrite: 300, Model: "claude-sonnet-4-5", Known: true}, wantCalls("toolu_tt1", "toolu_bash")},
	{"chat stream without usage", provider.Chat, true, strings.Replace(chatStreamFixture, `"usage":{"prompt_tokens":1850`, `"usage":null,"x":{"prompt_tokens":1850`, 1),
		provider.Usage{}, wantCalls("call_tt1", "call_bash")},
	{"responses stream ending incomplete", provider.Responses, true, strings.Replace(strings.Replace(responsesStreamFixture,
		"event: response.completed", "event: response.incomplete", 1), `"type":"response.completed"`, `"type":"response.incomplete"`, 1),
		provider.Usage{Input: 2100, Output: 77, CacheRead: 1920, Known: true}, wantCalls("call_tt1", "call_bash")},
	{"anthropic body with 1-hour writes", provider.Anthropic, false, `{"type":"message","content":[],"usage":{"input_tokens":7,"cache_creation_input_tokens":500,` +
		`"cache_creation":{"ephemeral_5m_input_tokens":200,"ephemeral_1h_input_tokens":300},"cache_read_input_tokens":0,"output_tokens":3}}`,
		provider.Usage{Input: 507, Output: 3, CacheWrite: 500, CacheWrite1h: 300, Known: true}, nil},
	{"anthropic body without cache fields", provider.Anthropic, false, `{"type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":7,"output_tokens":3}}`,
		provider.Usage{Input: 7, Output: 3, Known: true}, nil},
	{"chat body with two choices", provider.Chat, false, `{"choices":[{"index":0,"message":{"tool_calls":[{"id":"a","function":{"name":"bash","arguments":"{}"}}]}},` +
		`{"index":1,"message":{"tool_calls":[{"id":"b","function":{"name":"token_terminator","arguments":"{}"}}]}}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
		provider.Usage{Input: 1, Output: 2, Known: true}, []ToolCall{{ID: "a", Name: "bash"}, {ID: "b", Name: "token_terminator", Arguments: []byte("{}")}}},
	{"not json", provider.Chat, false, `<html>502 Bad Gateway</html>`, provider.Usage{}, nil},
	{"error body", provider.Anthropic, false, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, provider.Usage{}, nil},
	{"trailing garbage", provider.Responses, false, responsesBodyFixture + `x`, provider.Usage{}, nil},
	{"unknown format", "gemini", false, chatBodyFixture, provider.Usage{}, nil},
	{"broken event stops the parse", provider.Anthropic, true, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\nevent: content_block_delta\ndata: {nope\n\n" + anthropicStreamFixture,
		provider.Usage{}, nil},
}

func read(c readerCase, chunks ...string) *Reader {
	r := NewReader(c.format, Options{Stream: c.stream, Keep: keepOurs})
	for _, ch := range chunks {
		if n, err := r.Write([]byte(ch)); n != len(ch) || err != nil {
			panic("Write must consume everything")
		}
	}
	return r
}

func check(t *testing.T, r *Reader, c readerCase, how string) {
	t.Helper()
	if u := r.Usage(); u != c.usage {
		t.Fatalf("%s: usage %+v, want %+v", how, u, c.usage)
	}
	if calls := r.ToolCalls(); !reflect.DeepEqual(calls, c.calls) && !(len(calls) == 0 && len(c.calls) == 0) {
		t.Fatalf("%s: calls %q, want %q", how, calls, c.calls)
	}
}

func TestReader(t *testing.T) {
	for _, c := range readerCases {
		t.Run(c.name, func(t *testing.T) {
			check(t, read(c, c.input), c, "whole")
			// Every split point: incremental parsing must not depend on
			// where the network cut the bytes.
			for i := 1; i < len(c.input); i++ {
				check(t, read(c, c.input[:i], c.input[i:]), c, "split")
			}
			bytewise := make([]string, len(c.input))
			for i := range c.input {
				bytewise[i] = c.input[i : i+1]
			}
			check(t, read(c, bytewise...), c, "byte by byte")
		})
	}
}

func TestReaderBounds(t *testing.T) {
	r := NewReader(provider.Chat, Options{MaxBody: 100})
	r.Write([]byte(chatBodyFixture))
	if u := r.Usage(); u.Known {
		t.Fatalf("a body over MaxBody must not be read, got %+v", u)
	}
	// Kept arguments of a stream count against MaxBody too.
	r = NewReader(provider.Anthropic, Options{Stream: true, Keep: keepOurs, MaxBody: 40})
	r.Write([]byte(anthropicStreamFixture))
	if u := r.Usage(); u.Known {
		t.Fatalf("arguments over MaxBody must stop the parse, got %+v", u)
	}
	// Without Keep nothing is kept, so the same bound is not reached.
	r = NewReader(provider.Anthropic, Options{Stream: true, MaxBody: 40})
	r.Write([]byte(anthropicStreamFixture))
	if u := r.Usage(); !u.Known || len(r.ToolCalls()) != 2 || r.ToolCalls()[0].Arguments != nil {
		t.Fatalf("unkept calls: usage %+v calls %q", u, r.ToolCalls())
	}
}

func TestReaderUsageWhileStreaming(t *testing.T) {
	// message_start's input figures are known before the stream ends.
	i := strings.Index(anthropicStreamFixture, "event: content_block_start")
	r := NewReader(provider.Anthropic, Options{Stream: true})
	r.Write([]byte(anthropicStreamFixture[:i]))
	want := provider.Usage{Input: 4312, Output: 1, CacheRead: 4000, CacheWrite: 300, Model: "claude-sonnet-4-5", Known: true}
	if u := r.Usage(); u != want {
		t.Fatalf("usage %+v, want %+v", u, want)
	}
}

func FuzzReader(f *testing.F) {
	for i, c := range readerCases {
		f.Add(uint8(i), c.input, uint16(len(c.input)/2))
	}
	formats := []provider.Format{provider.Chat, provider.Responses, provider.Anthropic}
	f.Fuzz(func(t *testing.T, sel uint8, input string, cut uint16) {
		c := readerCase{format: formats[int(sel)%3], stream: sel&4 != 0, input: input}
		whole := read(c, input)
		at := int(cut) % (len(input) + 1)
		split := read(c, input[:at], input[at:])
		if whole.Usage() != split.Usage() || !reflect.DeepEqual(whole.ToolCalls(), split.ToolCalls()) {
			t.Fatalf("split at %d changed the result", at)
		}
	})
}
