package recovery

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// What recovery costs when it is not used: appending the tool to a 1 MB
// request, and a 2000-event answer stream passing through the stitcher.

func BenchmarkAppendTool1MB(b *testing.B) {
	body := fixtures.ChatBody("gpt-4o", fixtures.Turns(1, 50, 20000), "")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := AppendTool(provider.Chat, body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFollowUp1MB(b *testing.B) {
	body, _ := AppendTool(provider.Chat, fixtures.ChatBody("gpt-4o", fixtures.Turns(1, 50, 20000), ""))
	answer := []byte(chatAnswer(true, ""))
	calls := []Call{{ID: "own1", Result: []byte(`{"content":"` + strings.Repeat("x", 8000) + `"}`)}}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := FollowUp(provider.Chat, body, answer, calls); err != nil {
			b.Fatal(err)
		}
	}
}

// longStream is an answer of n text deltas (and no call of ours).
func longStream(format provider.Format, n int) []byte {
	var b strings.Builder
	switch format {
	case provider.Anthropic:
		b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n")
		b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
		for i := range n {
			fmt.Fprintf(&b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"word %d of a long answer \"}}\n\n", i)
		}
		b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
		b.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":4000}}\n\n")
		b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	case provider.Responses:
		seq := 0
		ev := func(name, rest string) {
			fmt.Fprintf(&b, "event: %s\ndata: {\"type\":%q,\"sequence_number\":%d,%s}\n\n", name, name, seq, rest)
			seq++
		}
		ev("response.created", `"response":{"id":"resp_1","output":[],"usage":null}`)
		ev("response.output_item.added", `"output_index":0,"item":{"id":"msg_1","type":"message","role":"assistant","content":[]}`)
		for i := range n {
			ev("response.output_text.delta", fmt.Sprintf(`"item_id":"msg_1","output_index":0,"content_index":0,"delta":"word %d of a long answer "`, i))
		}
		ev("response.output_item.done", `"output_index":0,"item":{"id":"msg_1","type":"message","role":"assistant","content":[]}`)
		ev("response.completed", `"response":{"id":"resp_1","output":[],"usage":{"input_tokens":10,"output_tokens":4000,"total_tokens":4010}}`)
	case provider.Chat:
		for i := range n {
			fmt.Fprintf(&b, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"word %d of a long answer \"},\"finish_reason\":null}]}\n\n", i)
		}
		b.WriteString("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}
	return []byte(b.String())
}

func BenchmarkStitcherPassThrough(b *testing.B) {
	for _, format := range allFormats {
		stream := longStream(format, 2000)
		b.Run(string(format), func(b *testing.B) {
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			var out bytes.Buffer
			for b.Loop() {
				out.Reset()
				st, _ := NewStitcher(format, &out, Config{})
				for p := stream; len(p) > 0; {
					n := min(len(p), 1400) // a network read's worth
					st.Write(p[:n])
					p = p[n:]
				}
				if r, err := st.EndRound(); err != nil || r.Continue {
					b.Fatal(err)
				}
				if !bytes.Equal(out.Bytes(), stream) {
					b.Fatal("not passed through byte for byte")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2000, "ns/event")
		})
	}
}

func BenchmarkExecuteGet(b *testing.B) {
	mem := newMem()
	a := mem.put(b, loopTenant, "bash", strings.Repeat("0123456789abcdef", 64<<10/16*16))
	args := []byte(`{"action":"artifact_get","artifact_id":"` + artifact.ID(a.Digest) + `","offset":500000,"limit":8000}`)
	b.ReportAllocs()
	for b.Loop() {
		Execute(context.Background(), mem, loopTenant, args)
	}
}
