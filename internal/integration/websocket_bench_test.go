package integration

import (
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/fakeprovider"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/wsrelay"
)

// BenchmarkWebSocketMessage times one response.create round trip (sent to
// response.completed read) over a socket, directly to the fake provider
// and through Caddy with the handler compiling; p50 and p99 per message
// are reported. The difference is the latency the gateway adds.
//
//	go test ./internal/integration -run '^$' -bench BenchmarkWebSocketMessage -benchtime 64x
func BenchmarkWebSocketMessage(b *testing.B) {
	steps := fixtures.Session(fixtures.SessionOptions{Format: "openai_responses", Steps: 16, PersonTurns: 4,
		OutputChars: 9000, ReReadEvery: 3, Seed: 4, Client: "codex"})
	run := func(b *testing.B, base string) {
		c := dialWS(b, base, "/v1/responses", "sk-ws-bench")
		var took []time.Duration
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			msg := createMessage(steps[i%len(steps)].Body)
			start := time.Now()
			c.send(maskedFrame(true, wsrelay.OpText, msg))
			c.untilCompleted()
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50_ms")
		b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99_ms")
	}
	b.Run("direct", func(b *testing.B) {
		srv := httptest.NewServer(&fakeprovider.Provider{})
		defer srv.Close()
		run(b, srv.URL)
	})
	b.Run("gateway", func(b *testing.B) {
		srv := httptest.NewServer(&fakeprovider.Provider{})
		defer srv.Close()
		g := startGateway(b, wsSnippet, &upstream{Server: srv})
		run(b, g.URL)
	})
}
