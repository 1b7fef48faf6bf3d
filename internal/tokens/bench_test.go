package tokens

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// warmBody builds the benchmark request: about 1 MB of OpenAI chat history
// (large tool results), then a newest tool result of 20 KB made from seed.
type warmBody struct {
	hist []msg
}

func newWarmBody() warmBody {
	return warmBody{hist: history(rand.New(rand.NewPCG(7, 8)), 1000_000)}
}

func (w warmBody) with(seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 99))
	msgs := append(slices.Clip(w.hist), msg{Role: "tool", ToolCallID: "call_new", Content: genToolResult(r, 20_000)})
	return chatBody("gpt-4o", msgs)
}

// reportLatency adds p50/p90/max of the per-op durations to the benchmark.
func reportLatency(b *testing.B, d []time.Duration) {
	slices.Sort(d)
	ms := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))]) / 1e6 }
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.9), "p90-ms")
	b.ReportMetric(ms(1), "max-ms")
}

// BenchmarkCountWarm1MB: the history was counted before (an earlier request
// of the conversation), only the newest 20 KB tool result is new, and it is
// different in every iteration.
func BenchmarkCountWarm1MB(b *testing.B) {
	b.Run("split", func(b *testing.B) { benchCountWarm1MB(b, false) })
	b.Run("hinted", func(b *testing.B) { benchCountWarm1MB(b, true) })
}

// benchCountWarm1MB counts with the message starts as hints (what the
// compiler gives) or without (every byte re-split).
func benchCountWarm1MB(b *testing.B, hinted bool) {
	w := newWarmBody()
	c, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	prev := chatBody("gpt-4o", w.hist) // the previous request: history only
	count := func(body []byte) artifact.TokenCount {
		if hinted {
			return c.CountHinted(ctx, "gpt-4o", body, messageStarts(body))
		}
		return c.Count(ctx, "gpt-4o", body)
	}
	for count(prev).Status != StatusExact {
		time.Sleep(10 * time.Millisecond) // first call builds the encoder
	}
	var d []time.Duration
	b.SetBytes(int64(len(prev)))
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		body := w.with(uint64(i))
		b.StartTimer()
		t0 := time.Now()
		tc := count(body)
		d = append(d, time.Since(t0))
		if tc.Status != StatusExact {
			b.Fatalf("status %q", tc.Status)
		}
	}
	b.StopTimer()
	reportLatency(b, d)
}

// BenchmarkCountCold1MB: nothing cached (a fresh Counter each time; the
// process-wide encoder is built). With the default 250ms budget a cold 1 MB
// body is counted or skipped within the budget; "counted" reports the
// fraction counted. Work left past the budget is drained between ops.
func BenchmarkCountCold1MB(b *testing.B) {
	body := newWarmBody().with(1)
	if _, err := encodingNamed("o200k_base").load(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var d []time.Duration
	counted := 0
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		c, err := New(Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		tc := c.Count(ctx, "gpt-4o", body)
		d = append(d, time.Since(t0))
		b.StopTimer()
		if tc.Status == StatusExact {
			counted++
		}
		for c.backlog.Load() > 0 {
			time.Sleep(time.Millisecond)
		}
	}
	reportLatency(b, d)
	b.ReportMetric(float64(counted)/float64(b.N), "counted")
}

// BenchmarkCountColdCorpus: real agent text (less repetitive than the
// generator's) counted cold, the largest corpus body, with a budget long
// enough to finish so that the full cold cost is measured.
func BenchmarkCountColdCorpus(b *testing.B) {
	body, err := os.ReadFile(corpusDir + "/claude-code-sessions/4a6ca08a-a0fa-47ba-a4d3-94f3e7093db1.last.json")
	if err != nil {
		b.Skip("corpus absent:", err)
	}
	benchCountWhole(b, body, nil)
}

// benchCountWhole times whole counts of body (with hints, if any) by a
// fresh Counter each time, whose budget lets every count finish.
func benchCountWhole(b *testing.B, body []byte, hints []int) {
	if _, err := encodingNamed("o200k_base").load(); err != nil {
		b.Fatal(err)
	}
	var d []time.Duration
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		c, err := New(Config{Budget: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		if tc := c.CountHinted(context.Background(), "gpt-4o", body, hints); tc.Status != StatusExact {
			b.Fatalf("status %q", tc.Status)
		}
		d = append(d, time.Since(t0))
	}
	reportLatency(b, d)
}

// BenchmarkFirstCount1MB: the first count of a process, right after New
// (what provisioning does), against a cold count once the process is warm
// (a fresh Counter, nothing cached). Each op is a new process running
// TestFirstCountChild. Reported: first-ms and cold-ms (medians), and
// first-budget-% (first counts past the default budget).
func BenchmarkFirstCount1MB(b *testing.B) {
	var first, cold []time.Duration
	budget := 0
	for range b.N {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFirstCountChild$")
		cmd.Env = append(os.Environ(), "TOKENS_FIRST_COUNT=1")
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("%v\n%s", err, out)
		}
		var f, c time.Duration
		var st string
		if _, err := fmt.Sscanf(string(out), "first=%d cold=%d status=%s", &f, &c, &st); err != nil {
			b.Fatalf("child said %q: %v", out, err)
		}
		first, cold = append(first, f), append(cold, c)
		if st != string(StatusExact) {
			budget++
		}
	}
	med := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2]) / 1e6
	}
	b.ReportMetric(med(first), "first-ms")
	b.ReportMetric(med(cold), "cold-ms")
	b.ReportMetric(100*float64(budget)/float64(b.N), "first-budget-%")
}

// TestFirstCountChild is BenchmarkFirstCount1MB's child process.
func TestFirstCountChild(t *testing.T) {
	if os.Getenv("TOKENS_FIRST_COUNT") == "" {
		t.Skip("run by BenchmarkFirstCount1MB")
	}
	body := newWarmBody().with(1)
	c, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	tc := c.Count(context.Background(), "gpt-4o", body)
	first := time.Since(t0)
	for c.backlog.Load() > 0 {
		time.Sleep(time.Millisecond)
	}
	// The cold count is of other text of the same kind: a count's answers
	// stay in the process (the workers' hot tables), so the same body
	// again would not be cold.
	other := chatBody("gpt-4o", history(rand.New(rand.NewPCG(9, 10)), 1000_000))
	c2, _ := New(Config{})
	t0 = time.Now()
	c2.Count(context.Background(), "gpt-4o", other)
	cold := time.Since(t0)
	fmt.Printf("first=%d cold=%d status=%s\n", first, cold, tc.Status)
}

// BenchmarkCountCold16MB: the body of the gateway's 16 MB cold benchmark
// (integration BenchmarkGatewayFormats/chat/16MB/cold: 800 new 20 KB tool
// results), counted with message hints by a fresh Counter whose budget is
// long enough to finish, so the whole cold cost shows (the default budget
// stops waiting at 219 ms).
func BenchmarkCountCold16MB(b *testing.B) {
	body := fixtures.ChatBody("gpt-4o", fixtures.Turns(2_000_000, 801, 20000), "")
	benchCountWhole(b, body, messageStarts(body))
}
