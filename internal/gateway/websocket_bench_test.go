package gateway

import (
	"strings"
	"testing"
)

// BenchmarkWebSocketSettle: what settling one message costs on the
// provider's side of the socket: reading a response.completed carrying a
// 64 KB output for its type, response id and usage, the ledger-free
// accounting and the log line.
func BenchmarkWebSocketSettle(b *testing.B) {
	w := newWSTest(b, nil)
	w.h.Ledger = nil
	msg := []byte(wsMessageBody("a", ""))
	done := []byte(`{"type":"response.completed","response":{"id":"r1","model":"gpt-5","output":[{"type":"message","content":[{"type":"output_text","text":"` +
		strings.Repeat("x", 64<<10) + `"}]}],"usage":{"input_tokens":900,"output_tokens":12,"input_tokens_details":{"cached_tokens":640}}}}`)
	b.SetBytes(int64(len(done)))
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		w.s.rewrite(msg)
		b.StartTimer()
		w.s.providerMessage(done)
	}
}
