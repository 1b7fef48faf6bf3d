package response

import (
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// A stream is complete at its terminal event, not before; a JSON body
// never says so (its length does).
func TestComplete(t *testing.T) {
	tests := []struct {
		format           provider.Format
		before, terminal string
		stream           bool
	}{
		{provider.Anthropic, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\n", "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", true},
		{provider.Chat, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n", "data: [DONE]\n\n", true},
		{provider.Responses, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{}}\n\n", "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":3}}}\n\n", true},
		{provider.Responses, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{}}\n\n", "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{}}\n\n", true},
		{provider.Chat, `{"choices":[],`, `"usage":{"prompt_tokens":3}}`, false},
	}
	for _, tt := range tests {
		r := NewReader(tt.format, Options{Stream: tt.stream})
		r.Write([]byte(tt.before))
		if r.Complete() {
			t.Fatalf("%s: complete before the terminal event", tt.format)
		}
		r.Write([]byte(tt.terminal))
		if r.Complete() != tt.stream {
			t.Fatalf("%s stream=%v: complete %v after the end", tt.format, tt.stream, r.Complete())
		}
	}
}
