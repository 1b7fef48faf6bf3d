package response

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// BenchmarkReaderStream: what teeing a long answer stream (2000 text
// deltas, then a tool call and usage) into a Reader costs.
func BenchmarkReaderStream(b *testing.B) {
	for _, c := range []struct {
		format      provider.Format
		delta, tail string
	}{
		{provider.Chat, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"word %d of a long answer "},"finish_reason":null}],"usage":null}` + "\n\n", chatStreamFixture},
		{provider.Responses, "event: response.output_text.delta\n" + `data: {"type":"response.output_text.delta","sequence_number":%d,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"word of a long answer "}` + "\n\n", responsesStreamFixture},
		{provider.Anthropic, "event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"word %d of a long answer "}}` + "\n\n", anthropicStreamFixture},
	} {
		var s strings.Builder
		for i := range 2000 {
			fmt.Fprintf(&s, c.delta, i)
		}
		s.WriteString(c.tail)
		stream := []byte(s.String())
		b.Run(string(c.format), func(b *testing.B) {
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			for b.Loop() {
				r := NewReader(c.format, Options{Stream: true, Keep: keepOurs})
				for p := stream; len(p) > 0; {
					n := min(len(p), 1400)
					r.Write(p[:n])
					p = p[n:]
				}
				if !r.Usage().Known || len(r.ToolCalls()) != 2 {
					b.Fatal("fixture not read")
				}
			}
		})
	}
}
