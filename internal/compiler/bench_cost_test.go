package compiler_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// The cost decision's overhead on a warm 1 MB compile: the same request
// (the next step of a 51-result chat session whose previous step went out
// 20 s earlier) compiled with the decision on and off, in one binary, with
// the gateway's compaction defaults. The difference of the two is what the
// decision adds (its plan variants, renders, cache state); profile the
// "on" case for its share (README, Cost).
func BenchmarkCostDecision1MBWarm(b *testing.B) {
	turns := fixtures.Turns(1000, 51, 20000)
	anth := fixtures.AnthropicOptions{System: true, CacheLast: true} // Claude Code's shape: receipt blocks, a receipt breakpoint
	for _, tt := range []struct {
		name, path string
		prev, body []byte
		off        bool
	}{
		{"chat/on", "/v1/chat/completions", fixtures.ChatBody("gpt-5", turns[:50], ""), fixtures.ChatBody("gpt-5", turns, ""), false},
		{"chat/off", "/v1/chat/completions", fixtures.ChatBody("gpt-5", turns[:50], ""), fixtures.ChatBody("gpt-5", turns, ""), true},
		{"anthropic/on", "/v1/messages", fixtures.AnthropicBody("claude-sonnet-4-5", turns[:50], "", anth), fixtures.AnthropicBody("claude-sonnet-4-5", turns, "", anth), false},
		{"anthropic/off", "/v1/messages", fixtures.AnthropicBody("claude-sonnet-4-5", turns[:50], "", anth), fixtures.AnthropicBody("claude-sonnet-4-5", turns, "", anth), true},
	} {
		b.Run(tt.name, func(b *testing.B) {
			prev, body := tt.prev, tt.body
			opts := compiler.Options{InlineLeases: 1,
				Compaction: compiler.Compaction{Enabled: true, MinVaultChars: 4000, CollapseAfterTurns: 6, InlineRecentTurns: 5}}
			opts.Cost.Off = tt.off
			c, err := compiler.New(opts, compilertest.NewMemStore(), nil)
			if err != nil {
				b.Fatal(err)
			}
			at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
			req := func(body []byte, at time.Time) compiler.Result {
				return c.Compile(context.Background(), compiler.Request{Path: tt.path, Body: body,
					Scope: artifact.Scope{Tenant: "warm"}, Mode: compiler.ModeEnforce, Time: at})
			}
			req(prev, at)
			want := req(body, at.Add(20*time.Second)).Receipts
			if want == 0 {
				b.Fatal("setup: no receipts")
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			durs := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				res := req(body, at.Add(20*time.Second))
				durs = append(durs, time.Since(t0))
				if res.Receipts != want {
					b.Fatalf("%d receipts (%s), want %d", res.Receipts, res.Reason, want)
				}
			}
			b.StopTimer()
			slices.Sort(durs)
			b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "p50-ms")
		})
	}
}
