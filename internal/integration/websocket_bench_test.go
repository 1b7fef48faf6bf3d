package integration

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/fakeprovider"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/wsrelay"
)

// BenchmarkWebSocketMessage times one response.create round trip (sent to
// response.completed read) over two sockets to the same upstream: one
// directly, one through Caddy with the handler compiling. Each iteration
// sends the same message on both, alternating which goes first, so that
// load on a shared machine falls on both alike; p50 and p99 of each and of
// the paired difference (the latency the gateway adds to that message)
// are reported. Both sockets first carry one small message, untimed, so
// that neither side's first-use costs land on a scripted step.
//
// Two upstreams: the fake provider, whose work grows with the prompt it
// bills (a compiled message is smaller, so it answers sooner, as a model
// reading fewer tokens would), and a constant one that answers every
// message alike, which leaves the gateway's own cost: compile and relay.
//
//	go test ./internal/integration -run '^$' -bench BenchmarkWebSocketMessage -benchtime 64x
func BenchmarkWebSocketMessage(b *testing.B) {
	b.Run("fakeprovider", func(b *testing.B) {
		srv := httptest.NewServer(&fakeprovider.Provider{})
		defer srv.Close()
		benchWebSocketMessage(b, srv)
	})
	b.Run("constant", func(b *testing.B) {
		srv := constantWSUpstream()
		defer srv.Close()
		benchWebSocketMessage(b, srv)
	})
}

// constantWSUpstream answers every response.create with the same short
// streamed response, whatever the message: its time does not depend on
// what the gateway forwarded.
func constantWSUpstream() *httptest.Server {
	events := []string{
		`{"type":"response.created","sequence_number":0,"response":{"id":"resp_c","object":"response","status":"in_progress","output":[],"usage":null}}`,
		`{"type":"response.completed","sequence_number":1,"response":{"id":"resp_c","object":"response","status":"completed","output":[],"usage":{"input_tokens":1000,"input_tokens_details":{"cached_tokens":0},"output_tokens":16,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":1016}}}`,
	}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, ok := fakeprovider.Upgrade(w, r.Header.Get("Sec-WebSocket-Key"))
		if !ok {
			return
		}
		defer conn.Close()
		send := func(op byte, p []byte) error {
			_, err := conn.Write(wsrelay.AppendFrame(nil, true, op, false, [4]byte{}, p))
			return err
		}
		fakeprovider.ServeFrames(brw.Reader, send, func([]byte) error {
			for _, ev := range events {
				if err := send(wsrelay.OpText, []byte(ev)); err != nil {
					return err
				}
			}
			return nil
		})
	}))
}

func benchWebSocketMessage(b *testing.B, srv *httptest.Server) {
	steps := fixtures.Session(fixtures.SessionOptions{Format: "openai_responses", Steps: 16, PersonTurns: 4,
		OutputChars: 9000, ReReadEvery: 3, Seed: 4, Client: "codex"})
	g := startGateway(b, wsSnippet, &upstream{Server: srv})
	// Distinct credentials: each side has its own simulated prompt cache
	// at the provider, and the gateway's tenant state is its own.
	direct := dialWS(b, srv.URL, "/v1/responses", "sk-ws-bench-direct")
	via := dialWS(b, g.URL, "/v1/responses", "sk-ws-bench-gateway")
	roundTrip := func(c *wsClient, msg []byte) time.Duration {
		start := time.Now()
		c.send(maskedFrame(true, wsrelay.OpText, msg))
		c.untilCompleted()
		return time.Since(start)
	}
	warm := []byte(`{"type":"response.create","model":"gpt-5","input":[{"role":"user","content":[{"type":"input_text","text":"warm up"}]}]}`)
	roundTrip(direct, warm)
	roundTrip(via, warm)
	var d, v, added []time.Duration
	for i := 0; b.Loop(); i++ {
		msg := createMessage(steps[i%len(steps)].Body)
		var td, tv time.Duration
		if i%2 == 0 {
			td, tv = roundTrip(direct, msg), roundTrip(via, msg)
		} else {
			tv, td = roundTrip(via, msg), roundTrip(direct, msg)
		}
		d, v, added = append(d, td), append(v, tv), append(added, tv-td)
	}
	report := func(name string, ds []time.Duration) {
		slices.Sort(ds)
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, name+"_p50_ms")
		b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, name+"_p99_ms")
	}
	report("direct", d)
	report("gateway", v)
	report("added", added)
}
