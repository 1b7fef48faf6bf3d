package response

import (
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// TestWriteEvent: a Responses WebSocket message read as one event gives
// the usage and completeness its SSE event would, whitespace and all.
func TestWriteEvent(t *testing.T) {
	tests := []struct {
		name, event, data string
		want              provider.Usage
		complete          bool
	}{
		{"completed", "response.completed",
			`{"type":"response.completed","response":{"id":"r1","model":"gpt-5","usage":{"input_tokens":900,"output_tokens":12,"input_tokens_details":{"cached_tokens":640}}}}`,
			provider.Usage{Input: 900, Output: 12, CacheRead: 640, Model: "gpt-5", Known: true}, true},
		{"pretty-printed", "response.incomplete", "{\n \"type\": \"response.incomplete\",\n \"response\": {\"usage\": {\"input_tokens\": 5, \"output_tokens\": 1}}\n}",
			provider.Usage{Input: 5, Output: 1, Known: true}, true},
		{"no usage", "response.created", `{"type":"response.created","response":{"id":"r1"}}`, provider.Usage{}, false},
		{"not JSON", "response.completed", `{"type":`, provider.Usage{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(provider.Responses, Options{Stream: true})
			r.WriteEvent(tt.event, []byte(tt.data))
			if got := r.Usage(); got != tt.want {
				t.Fatalf("usage %+v, want %+v", got, tt.want)
			}
			if r.Complete() != tt.complete {
				t.Fatalf("complete %v", r.Complete())
			}
		})
	}
}
