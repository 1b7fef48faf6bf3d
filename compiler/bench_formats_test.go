package compiler_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/compiler"
	"github.com/tokenterminator/caddy-token-terminator/compiler/compilertest"
)

// The chat benchmark's shape (~1 MB, 50 tool results of 20 KB all
// delivered before (plus the newest one, inline), so all 50 go out as receipts; warm store) in the
// Responses and Anthropic formats, with reasoning items / signed thinking
// blocks and cache_control breakpoints, so the validity check's cost shows.
func BenchmarkCompileResponses1MBWarm(b *testing.B) {
	o := compilertest.ResponsesOptions{Reasoning: true}
	benchFormat(b, responsesPath, func(turns []compilertest.ChatTurn, final string) []byte {
		return compilertest.ResponsesBody("gpt-5", turns, final, o)
	})
}

func BenchmarkCompileAnthropic1MBWarm(b *testing.B) {
	o := compilertest.AnthropicOptions{System: true, Thinking: true, CacheLast: true}
	benchFormat(b, messagesPath, func(turns []compilertest.ChatTurn, final string) []byte {
		return compilertest.AnthropicBody("claude-sonnet-4-5", turns, final, o)
	})
}

func benchFormat(b *testing.B, path string, render func([]compilertest.ChatTurn, string) []byte) {
	// The next step: one more tool round after the 50 already delivered.
	turns := compilertest.Turns(1000, 51, 20000)
	prev, body := render(turns[:50], ""), render(turns, "")
	c, err := compiler.New(compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
	if err != nil {
		b.Fatal(err)
	}
	compileAt(c, path, "warm", prev)
	if res := compileAt(c, path, "warm", body); res.Receipts != 50 {
		b.Fatalf("setup: %d receipts (%s)", res.Receipts, res.Reason)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	durs := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		res := c.Compile(context.Background(), compiler.Request{Path: path, Body: body, Scope: compiler.Scope{Tenant: "warm"}, Mode: compiler.ModeEnforce})
		durs = append(durs, time.Since(t0))
		if res.Receipts != 50 {
			b.Fatalf("%d receipts (%s)", res.Receipts, res.Reason)
		}
	}
	b.StopTimer()
	slices.Sort(durs)
	b.ReportMetric(float64(durs[len(durs)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(durs[len(durs)*99/100].Microseconds())/1000, "p99-ms")
}
