package response

import (
	"strings"
	"testing"
)

func TestGeminiReader(t *testing.T) {
	body := `{"candidates":[{"content":{"role":"model","parts":[{"text":"x","thought":true},{"functionCall":{"name":"token_terminator","args":{"action":"artifact_get","artifact_id":"a_1"},"id":"c1"},"thoughtSignature":"sig"},{"functionCall":{"name":"read_file","args":{"p":1}}}]},"finishReason":"STOP"}],` +
		`"usageMetadata":{"promptTokenCount":5000,"cachedContentTokenCount":4096,"candidatesTokenCount":20,"thoughtsTokenCount":30,"totalTokenCount":5050},"modelVersion":"gemini-2.5-pro"}`
	stream := "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Hel\"}]}}],\"usageMetadata\":{\"promptTokenCount\":5000,\"cachedContentTokenCount\":4096},\"modelVersion\":\"gemini-2.5-pro\"}\r\n\r\n" +
		"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"token_terminator\",\"args\":{\"action\":\"artifact_get\",\"artifact_id\":\"a_1\"},\"id\":\"c1\"}}]}}],\"usageMetadata\":{\"promptTokenCount\":5000,\"cachedContentTokenCount\":4096,\"candidatesTokenCount\":10}}\r\n\r\n" +
		"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"read_file\",\"args\":{\"p\":1}}}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":5000,\"cachedContentTokenCount\":4096,\"candidatesTokenCount\":20,\"thoughtsTokenCount\":30},\"modelVersion\":\"gemini-2.5-pro\"}\r\n\r\n"
	tests := []struct {
		name   string
		stream bool
		in     string
	}{
		{"body", false, body},
		{"array body", false, "[" + body + "]"},
		{"sse", true, stream},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, size := range []int{1, 7, len(tt.in)} {
				r := NewReader(FormatGemini, Options{Stream: tt.stream, Keep: []string{"token_terminator"}})
				for s := tt.in; s != ""; {
					n := min(size, len(s))
					r.Write([]byte(s[:n]))
					s = s[n:]
				}
				u := r.Usage()
				if !u.Known || u.Input != 5000 || u.CacheRead != 4096 || u.Output != 50 || u.Model != "gemini-2.5-pro" {
					t.Fatalf("usage %+v", u)
				}
				calls := r.ToolCalls()
				if len(calls) != 2 || calls[0].Name != "token_terminator" || calls[0].ID != "c1" ||
					string(calls[0].Arguments) != `{"action":"artifact_get","artifact_id":"a_1"}` || calls[1].Name != "read_file" || calls[1].Arguments != nil {
					t.Fatalf("calls %+v", calls)
				}
				if r.Complete() != tt.stream {
					t.Fatalf("complete %v", r.Complete())
				}
			}
		})
	}
	// Odd input stops the parse: no usage.
	r := NewReader(FormatGemini, Options{Stream: true})
	r.Write([]byte("data: {not json\n\n"))
	if r.Usage().Known {
		t.Fatal("usage from a broken stream")
	}
	r = NewReader(FormatGemini, Options{})
	r.Write([]byte(strings.TrimSuffix(body, "}")))
	if r.Usage().Known {
		t.Fatal("usage from a truncated body")
	}
}

// FuzzGeminiReader: whatever the bytes, plain or SSE, in any pieces, the
// reader never panics and never keeps more than it was asked to.
func FuzzGeminiReader(f *testing.F) {
	f.Add([]byte(`{"candidates":[{"content":{"parts":[{"functionCall":{"name":"token_terminator","args":{}}}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1}}`), false, 3)
	f.Add([]byte("data: {\"usageMetadata\":{\"promptTokenCount\":1,\"cachedContentTokenCount\":1}}\n\ndata: [\n\n"), true, 5)
	f.Add([]byte(`[{"candidates":[]},{"usageMetadata":{}}]`), false, 1)
	f.Fuzz(func(t *testing.T, b []byte, stream bool, size int) {
		size = max(1, size%64+1)
		r := NewReader(FormatGemini, Options{Stream: stream, Keep: []string{"token_terminator"}, MaxBody: 1 << 16})
		for len(b) > 0 {
			n := min(size, len(b))
			r.Write(b[:n])
			b = b[n:]
		}
		u := r.Usage()
		for _, c := range r.ToolCalls() {
			if c.Name != "token_terminator" && c.Arguments != nil {
				t.Fatal("kept arguments of a client tool")
			}
		}
		_ = u
	})
}
