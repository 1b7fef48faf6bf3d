package tokens

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mergeLong gives exactly the parts of the quadratic merge, on the inputs
// where ties and long runs decide: runs of one byte, of whitespace mixes,
// of repeated short patterns, and random text.
func TestMergeLongEqualsQuadratic(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	var inputs []string
	for _, n := range []int{3, 17, 257, 300, 1000, 4097} {
		inputs = append(inputs,
			strings.Repeat(" ", n), strings.Repeat("\n", n), strings.Repeat("=", n), strings.Repeat("ab", n/2+1),
			strings.Repeat(" \t", n/2+1), strings.Repeat("日本", n/6+1), strings.Repeat("-=", n/2+1)+"x")
	}
	alphabets := []string{" \t\n", "ab", "abc ", "!?.,;:", "\x00\xff\x80a"}
	for range 200 {
		alpha := alphabets[r.IntN(len(alphabets))]
		n := 2 + r.IntN(2000)
		b := make([]byte, n)
		for i := range b {
			b[i] = alpha[r.IntN(len(alpha))]
		}
		inputs = append(inputs, string(b), genText(r, n))
	}
	for _, enc := range encNames {
		rk, err := encodingNamed(enc).load()
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range inputs {
			want := rk.mergeQuadratic([]byte(in), nil)
			got := rk.mergeLong([]byte(in), nil)
			if !slices.Equal(got, want) {
				t.Fatalf("%s %d bytes %.40q: mergeLong %d parts, quadratic %d", enc, len(in), in, len(got), len(want))
			}
		}
	}
}

// Long pre-tokens, counted by mergeLong, encode and count as tiktoken-go
// does.
func TestLongPreTokensEqualTiktoken(t *testing.T) {
	for _, enc := range encNames {
		for _, n := range []int{257, 1000, 3000} {
			checkEncode(t, enc, "a"+strings.Repeat(" ", n)+"b")
			checkEncode(t, enc, "x"+strings.Repeat("!-", n/2)+"\n")
			checkEncode(t, enc, strings.Repeat("\t \n", n/3)+"end")
		}
	}
}

// whitespaceBody is the body of the report: about 380 KB whose text holds
// 24 distinct runs of about 15 KB of spaces, each one pre-token that the
// byte-pair merge must take apart.
func whitespaceBody() []byte {
	var b strings.Builder
	for i := range 24 {
		fmt.Fprintf(&b, "word%d%sx", i, strings.Repeat(" ", 15_000+i))
	}
	return chatBody("gpt-4o", []msg{{Role: "user", Content: b.String()}})
}

// processCPU is the process's user and system CPU time so far.
func processCPU(t testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// countCPU counts body cold (a fresh Counter whose budget lets it finish)
// and returns the process CPU time it took, workers included, and the
// count.
func countCPU(t *testing.T, body []byte) (time.Duration, int) {
	c, err := New(Config{Budget: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	before := processCPU(t)
	got := c.Count(context.Background(), "gpt-4o", body)
	for c.backlog.Load() > 0 {
		time.Sleep(time.Millisecond)
	}
	if got.Status != StatusExact {
		t.Fatalf("count: %+v", got)
	}
	return processCPU(t) - before, got.N
}

// Counting a body of long whitespace runs costs CPU of the order of a
// normal body of its size: the process's CPU time over the count, the
// lowest of three, against a generous multiple of a tool-output body's.
// (The quadratic merge took seconds: ~9 CPU-seconds a megabyte.)
func TestLongRunsCostBounded(t *testing.T) {
	runs := whitespaceBody()
	normal := chatBody("gpt-4o", history(rand.New(rand.NewPCG(23, 24)), len(runs)))
	if _, err := encodingNamed("o200k_base").load(); err != nil {
		t.Fatal(err)
	}
	best := func(body []byte) (time.Duration, int) {
		d, n := countCPU(t, body)
		for range 2 {
			e, _ := countCPU(t, body)
			d = min(d, e)
		}
		return d, n
	}
	dn, _ := best(normal)
	dr, n := best(runs)
	t.Logf("CPU to count cold: %d-byte tool output %v, %d-byte whitespace runs %v (%d tokens)", len(normal), dn, len(runs), dr, n)
	// The race detector instruments the heap merge's many small steps more
	// heavily than the hot-table path of ordinary text, so its bound is
	// wider; the quadratic merge costs far more than either bound.
	factor, slack := time.Duration(10), 100*time.Millisecond
	if raceEnabled {
		factor, slack = 30, 500*time.Millisecond
	}
	if dr > factor*dn+slack {
		t.Fatalf("whitespace runs cost %v of CPU, more than %d× a normal body of their size (%v) + %v", dr, factor, dn, slack)
	}
}

// When a count gives up (its budget ended), the workers stop: of a cold
// body far too large for a 1 ms budget, only what was counted before the
// answer and the pieces then in progress are tokenized, not the rest.
func TestAbandonedCountStops(t *testing.T) {
	body := chatBody("gpt-4o", history(rand.New(rand.NewPCG(25, 26)), 8<<20))
	if _, err := encodingNamed("o200k_base").load(); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Budget: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Count(context.Background(), "gpt-4o", body); got.Status != StatusBudget {
		t.Fatalf("count: %+v", got)
	}
	// How much was counted before the answer depends on when the budget's
	// timer fired; what must hold is that after it only the pieces the
	// workers were on (content-defined, about 2 KiB each) are finished.
	atAnswer := c.tokenized.Load()
	for c.backlog.Load() > 0 {
		time.Sleep(time.Millisecond)
	}
	done := c.tokenized.Load()
	t.Logf("%d of %d bytes tokenized, %d of them after the answer", done, len(body), done-atAnswer)
	if after, bound := done-atAnswer, int64(runtime.GOMAXPROCS(0))*256<<10; after > bound {
		t.Fatalf("%d bytes were tokenized after a 1 ms budget answered (bound %d, body %d): the work went on after the answer", after, bound, len(body))
	}
}

// TestWorstTokenBodyCPU measures (TT_MEASURE=1) the process CPU time of
// one count of the whitespace-run body with the default budget, from the
// call until the last worker returned, and when the answer came.
func TestWorstTokenBodyCPU(t *testing.T) {
	if os.Getenv("TT_MEASURE") != "1" {
		t.Skip("a measurement: TT_MEASURE=1")
	}
	body := whitespaceBody()
	if _, err := encodingNamed("o200k_base").load(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		c, err := New(Config{})
		if err != nil {
			t.Fatal(err)
		}
		before, t0 := processCPU(t), time.Now()
		got := c.Count(context.Background(), "gpt-4o", body)
		answered, cpuAtAnswer := time.Since(t0), processCPU(t)-before
		for c.backlog.Load() > 0 {
			time.Sleep(time.Millisecond)
		}
		t.Logf("%d bytes: %s after %v (%v CPU); %v CPU in all", len(body), got.Status, answered, cpuAtAnswer, processCPU(t)-before)
	}
}
