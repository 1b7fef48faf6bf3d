package tokens

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

func TestEncodingFor(t *testing.T) {
	for model, want := range map[string]string{
		"gpt-4o": "o200k_base", "gpt-4o-mini-2024-07-18": "o200k_base", "gpt-4.1-nano": "o200k_base", "gpt-4.5-preview": "o200k_base",
		"gpt-5": "o200k_base", "gpt-5-2025-08-07": "o200k_base", "o1": "o200k_base", "o1-mini": "o200k_base",
		"o3-mini": "o200k_base", "o4-mini": "o200k_base", "openai/gpt-4o": "o200k_base",
		"azure/gpt-5-mini": "o200k_base", "openrouter/openai/o3": "o200k_base", "GPT-4O": "o200k_base",
		"gpt-4": "cl100k_base", "gpt-4-turbo": "cl100k_base", "gpt-4-0613": "cl100k_base",
		"gpt-3.5-turbo": "cl100k_base", "openai/gpt-3.5-turbo-16k": "cl100k_base",
		"": "", "claude-sonnet-4-5-20250929": "", "anthropic/claude-3-5-haiku": "", "gemini-2.5-pro": "",
		"kimi-k2-instruct-0905": "", "accounts/fireworks/models/qwen3-coder-480b": "", "llama-3-70b": "",
		"o2": "", "gpt-3": "", "text-davinci-003": "", "openai/": "", "gpt-4o/other": "",
	} {
		if got := provider.EncodingOf(model); got != want {
			t.Errorf("provider.EncodingOf(%q) = %q, want %q", model, got, want)
		}
	}
}

func TestNewConfig(t *testing.T) {
	for _, tok := range []string{"", "auto", "off", "o200k_base", "cl100k_base", " O200K_BASE "} {
		if _, err := New(Config{Tokenizer: tok}); err != nil {
			t.Errorf("%q: %v", tok, err)
		}
	}
	for _, cfg := range []Config{{Tokenizer: "p50k_base"}, {Tokenizer: "gpt-4o"}, {Tokenizer: "o200k"}} {
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), cfg.Tokenizer) {
			t.Errorf("%q: error %v should name the bad value", cfg.Tokenizer, err)
		}
	}
	if _, err := New(Config{Budget: -1}); err == nil {
		t.Error("negative budget accepted")
	}
	c, err := New(Config{})
	if err != nil || c.budget != DefaultBudget {
		t.Fatalf("defaults: %v %v", c.budget, err)
	}
	n := c.cache.shard[0].max * shards * entryBytes
	for _, m := range c.memos {
		n += 2 * m.genMax() // two generations
	}
	if n > DefaultCacheBytes || n < DefaultCacheBytes*9/10 {
		t.Errorf("default cache and memos account %d bytes", n)
	}
}

func TestStatuses(t *testing.T) {
	body := []byte(`{"model":"x","messages":[{"role":"user","content":"Hello there, don't panic."}]}`)
	o200k, cl100k := direct(t, "o200k_base", string(body)), direct(t, "cl100k_base", string(body))
	for _, c := range []struct {
		tokenizer, model string
		want             artifact.TokenCount
	}{
		{"auto", "gpt-4o", artifact.TokenCount{N: o200k, Encoding: "o200k_base", Exact: true, Status: "exact"}},
		{"auto", "openai/gpt-5", artifact.TokenCount{N: o200k, Encoding: "o200k_base", Exact: true, Status: "exact"}},
		{"auto", "gpt-3.5-turbo", artifact.TokenCount{N: cl100k, Encoding: "cl100k_base", Exact: true, Status: "exact"}},
		{"auto", "claude-sonnet-4", artifact.TokenCount{Status: "none"}},
		{"auto", "", artifact.TokenCount{Status: "none"}},
		{"o200k_base", "gpt-4o", artifact.TokenCount{N: o200k, Encoding: "o200k_base", Exact: true, Status: "exact"}},
		{"o200k_base", "gpt-4", artifact.TokenCount{N: o200k, Encoding: "o200k_base", Status: "estimate"}},
		{"o200k_base", "claude-sonnet-4", artifact.TokenCount{N: o200k, Encoding: "o200k_base", Status: "estimate"}},
		{"cl100k_base", "azure/gpt-4-turbo", artifact.TokenCount{N: cl100k, Encoding: "cl100k_base", Exact: true, Status: "exact"}},
		{"cl100k_base", "gpt-4o", artifact.TokenCount{N: cl100k, Encoding: "cl100k_base", Status: "estimate"}},
		{"off", "gpt-4o", artifact.TokenCount{Status: "none"}},
	} {
		got := newCounter(t, c.tokenizer).Count(context.Background(), c.model, body)
		if got != c.want {
			t.Errorf("%s %q: %+v, want %+v", c.tokenizer, c.model, got, c.want)
		}
	}
}

// TestBudget: a counting that cannot finish returns "budget" within the
// budget, the work still fills the cache, and the same body is then exact.
func TestBudget(t *testing.T) {
	// Counting 300 KB takes several ms (the own encoder counts about
	// 50 MB/s per core), past the 1 ms budget.
	body := chatBody("gpt-4o", history(rand.New(rand.NewPCG(11, 12)), 300_000))
	if _, err := encodingNamed("o200k_base").load(); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Budget: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	got := c.Count(context.Background(), "gpt-4o", body)
	// As in TestContextDone, the status is the assertion; the bound only
	// catches a wait for the whole count, loosely, for -race under load.
	if d := time.Since(t0); got.Status != StatusBudget || got.Encoding != "o200k_base" || got.N != 0 || got.Exact || d > time.Second {
		t.Fatalf("%+v after %v", got, d)
	}
	want := direct(t, "o200k_base", string(body))
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		got = c.Count(context.Background(), "gpt-4o", body)
		if got.Status == StatusExact {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("background counting never filled the cache")
		}
	}
	if got.N != want {
		t.Fatalf("warm count %d, direct %d", got.N, want)
	}
}

// TestContextDone: a done context ends the wait at once.
func TestContextDone(t *testing.T) {
	body := chatBody("gpt-4o", history(rand.New(rand.NewPCG(13, 14)), 200_000))
	c := newCounter(t, "auto")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := c.Count(ctx, "gpt-4o", body); got.Status != StatusBudget {
		t.Fatalf("canceled: %+v", got)
	}
	// A body no count of which has started, and too long to count within
	// the deadline (~20 ms on two cores): the first call's workers go on
	// filling the cache with body's pieces after it returned.
	fresh := chatBody("gpt-4o", history(rand.New(rand.NewPCG(17, 18)), 2_000_000))
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	// The status shows it did not wait for the count. The bound only
	// catches a wait far past the deadline: CI runs this under -race next
	// to other packages, where 50 ms was once 103.
	if got := newCounter(t, "auto").Count(ctx, "gpt-4o", fresh); got.Status != StatusBudget || time.Since(t0) > time.Second {
		t.Fatalf("deadline: %+v after %v", got, time.Since(t0))
	}
}

// TestBodyReuse: the caller may overwrite its body once Count returned,
// even while abandoned work continues; no wrong count may be cached.
func TestBodyReuse(t *testing.T) {
	orig := chatBody("gpt-4o", history(rand.New(rand.NewPCG(15, 16)), 200_000))
	body := append([]byte(nil), orig...)
	c, err := New(Config{Budget: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.Count(context.Background(), "gpt-4o", body)
	for i := range body {
		body[i] = 'x'
	}
	for c.backlog.Load() > 0 {
		time.Sleep(time.Millisecond)
	}
	c.budget = time.Minute
	if got, want := c.Count(context.Background(), "gpt-4o", orig).N, direct(t, "o200k_base", string(orig)); got != want {
		t.Fatalf("after reuse: %d, direct %d", got, want)
	}
}

// TestConcurrent: many goroutines count bodies sharing long prefixes (the
// same conversation at different steps) with overlapping pieces in flight;
// run with -race.
func TestConcurrent(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	hist := history(r, 120_000)
	var bodies [][]byte
	var want []int
	for i := 2; i <= len(hist); i += 2 {
		b := chatBody("gpt-4o", hist[:i])
		bodies = append(bodies, b)
		want = append(want, direct(t, "o200k_base", string(b)))
	}
	c, err := New(Config{Budget: time.Minute, CacheBytes: 40 * entryBytes * shards}) // small: evictions too
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for k := range 3 * len(bodies) {
				i := (g + k) % len(bodies)
				if got := c.Count(context.Background(), "openai/gpt-4o", bodies[i]); got.N != want[i] || got.Status != StatusExact {
					t.Errorf("body %d: %+v, direct %d", i, got, want[i])
				}
			}
		})
	}
	wg.Wait()
}

// TestVetoSignal: a rewrite smaller in bytes can hold more tokens (a long
// run that tokenizes into few tokens replaced by a receipt full of hex); the
// counter measures it so the compiler's gate can veto it.
func TestVetoSignal(t *testing.T) {
	c := newCounter(t, "auto")
	raw := chatBody("gpt-4o", []msg{{Role: "tool", ToolCallID: "call_1", Content: strings.Repeat(" ", 8000)}})
	out := chatBody("gpt-4o", []msg{{Role: "tool", ToolCallID: "call_1", Content: "[Token Terminator artifact a_" +
		"3f9a0c1e7b2d4f6a8c0e1b3d5f7a9c2e | tool=bash | chars=8000 | sha256=9c1e7b2d4f6a8c0e…]"}})
	rt, st := c.Count(context.Background(), "gpt-4o", raw), c.Count(context.Background(), "gpt-4o", out)
	if len(out) >= len(raw) || st.N <= rt.N {
		t.Fatalf("raw %d bytes %d tokens, rewrite %d bytes %d tokens: not a veto case", len(raw), rt.N, len(out), st.N)
	}
	t.Logf("raw %d bytes %d tokens, rewrite %d bytes %d tokens", len(raw), rt.N, len(out), st.N)
}

// TestLongPreToken: the byte-pair merge is quadratic in a pre-token's length,
// so a body with a pre-token longer than maxPreToken is not counted (at
// once, without burning CPU in the background); shorter ones are exact.
func TestLongPreToken(t *testing.T) {
	c := newCounter(t, "auto")
	for _, run := range []string{" ", "a", "=", "日"} {
		short := chatBody("gpt-4o", []msg{{Role: "tool", Content: "x " + strings.Repeat(run, 4000/len(run)) + " y"}})
		if got, want := c.Count(context.Background(), "gpt-4o", short), direct(t, "o200k_base", string(short)); got.N != want {
			t.Errorf("%q run: %+v, direct %d", run, got, want)
		}
		long := chatBody("gpt-4o", []msg{{Role: "tool", Content: "x " + strings.Repeat(run, 200_000/len(run)) + " y"}})
		t0 := time.Now()
		if got := c.Count(context.Background(), "gpt-4o", long); got.Status != StatusBudget || time.Since(t0) > time.Second {
			t.Errorf("%q run of 200 KB: %+v after %v", run, got, time.Since(t0))
		}
	}
}

// TestWithBudget: a Counter made by WithBudget has its own budget and
// shares the caches, so what one counted the other finds.
func TestWithBudget(t *testing.T) {
	c, err := New(Config{Tokenizer: "auto", Budget: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	short, err := c.WithBudget(time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WithBudget(-time.Second); err == nil {
		t.Fatal("negative budget accepted")
	}
	if d, _ := c.WithBudget(0); d.budget != DefaultBudget || c.budget != time.Minute {
		t.Fatalf("budgets %v and %v", d.budget, c.budget)
	}
	body := chatBody("gpt-4o", history(rand.New(rand.NewPCG(51, 52)), 200_000))
	ctx := context.Background()
	if st := short.Count(ctx, "gpt-4o", body).Status; st != StatusBudget {
		t.Fatalf("1ns budget, cold body: %s", st)
	}
	want := c.Count(ctx, "gpt-4o", body)
	if want.Status != StatusExact || want.N != direct(t, "o200k_base", string(body)) {
		t.Fatalf("count %+v, direct %d", want, direct(t, "o200k_base", string(body)))
	}
	if got := short.Count(ctx, "gpt-4o", body); got != want {
		t.Fatalf("the other budget's counter: %+v, want the shared cache's %+v", got, want)
	}
}

// TestNewBuildsTables: New builds the tables of the encodings it may use,
// so no request waits for them. Run in a fresh process, where no other
// test has built them yet.
func TestNewBuildsTables(t *testing.T) {
	if mode := os.Getenv("TOKENS_NEW_TABLES"); mode != "" {
		if _, err := New(Config{Tokenizer: mode}); err != nil {
			t.Fatal(err)
		}
		for _, e := range encodings {
			fmt.Printf("%s=%v\n", e.name, e.ranks != nil)
		}
		return
	}
	for mode, want := range map[string]string{
		"auto":        "o200k_base=true\ncl100k_base=true\n",
		"cl100k_base": "o200k_base=false\ncl100k_base=true\n",
		"off":         "o200k_base=false\ncl100k_base=false\n",
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNewBuildsTables$")
		cmd.Env = append(os.Environ(), "TOKENS_NEW_TABLES="+mode)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, out)
		}
		if got := strings.TrimSuffix(string(out), "PASS\n"); got != want {
			t.Errorf("tokenizer %s: tables built\n%swant\n%s", mode, got, want)
		}
	}
}

// TestBodyHold: with a hold, the work left past the budget reads the body
// itself under one reference, given back once when the last worker is
// done, and the caller overwrites the body only then; a hold that refuses
// (the bytes may be reused) makes the workers copy, as without one.
func TestBodyHold(t *testing.T) {
	orig := chatBody("gpt-4o", history(rand.New(rand.NewPCG(19, 20)), 300_000))
	want := direct(t, "o200k_base", string(orig))
	for _, refuse := range []bool{false, true} {
		c, err := New(Config{Budget: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		body := append([]byte(nil), orig...)
		var holds, releases atomic.Int32
		released := make(chan struct{})
		hold := func() (func(), bool) {
			holds.Add(1)
			if refuse {
				return nil, false
			}
			return func() {
				if releases.Add(1) == 1 {
					close(released)
				}
			}, true
		}
		if got := c.CountHeld(context.Background(), "gpt-4o", body, messageStarts(body), hold); got.Status != StatusBudget {
			t.Fatalf("refuse=%v: %+v, want budget", refuse, got)
		}
		if !refuse {
			select {
			case <-released: // the workers are done with body
			case <-time.After(time.Minute):
				t.Fatal("the hold was never given back")
			}
		}
		for i := range body {
			body[i] = 'x'
		}
		for c.backlog.Load() > 0 {
			time.Sleep(time.Millisecond)
		}
		if holds.Load() != 1 || releases.Load() != map[bool]int32{false: 1, true: 0}[refuse] {
			t.Fatalf("refuse=%v: %d holds, %d releases", refuse, holds.Load(), releases.Load())
		}
		c.budget = time.Minute
		if got := c.CountHinted(context.Background(), "gpt-4o", orig, messageStarts(orig)); got.N != want {
			t.Fatalf("refuse=%v: after reuse %d, direct %d", refuse, got.N, want)
		}
		// Nothing is missing now: no hold is taken.
		if c.CountHeld(context.Background(), "gpt-4o", orig, messageStarts(orig), hold); holds.Load() != 1 {
			t.Fatalf("refuse=%v: a warm count took a hold", refuse)
		}
	}
}

// A count that would queue behind more than the backlog bound of other
// work is refused at once (budget) and leaves nothing of its own in
// flight; once the backlog has drained, the same body counts exactly. The
// workers are held before their first piece, so the first body's queued
// work stays queued for as long as the test needs it (no timing).
func TestBacklogRefuses(t *testing.T) {
	first := chatBody("gpt-4o", history(rand.New(rand.NewPCG(21, 22)), 2_000_000))
	second := chatBody("gpt-4o", history(rand.New(rand.NewPCG(23, 24)), 300_000))
	c, err := New(Config{Budget: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c.backlogMax = 100 << 10
	held := make(chan struct{})
	c.beforePiece = func() { <-held }
	release := sync.OnceFunc(func() { close(held) })
	defer release()
	if got := c.Count(context.Background(), "gpt-4o", first); got.Status != StatusBudget {
		t.Fatalf("a 2 MB body counted with every worker held: %+v", got)
	}
	// The first count gave up, but its pieces stay queued behind the held
	// workers (at most one piece each is taken).
	if b := c.backlog.Load(); b < 1<<20 {
		t.Fatalf("backlog %d after the first count, want its 2 MB queued", b)
	}
	tokenized := c.tokenized.Load()
	if got := c.Count(context.Background(), "gpt-4o", second); got.Status != StatusBudget {
		t.Fatalf("second count %+v, want budget", got)
	}
	// The refused count owns no flight: every piece of it in flight is one
	// the first body queued (the two share pieces of JSON and prose).
	id := encodingNamed("o200k_base").id
	queued := map[key]bool{}
	split(first, minPiece, avgBits, func(p []byte) { queued[keyOf(id, p)] = true })
	c.mu.Lock()
	left := 0
	split(second, minPiece, avgBits, func(p []byte) {
		if k := keyOf(id, p); c.inflight[k] != nil && !queued[k] {
			left++
		}
	})
	c.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d pieces of the refused count are in flight", left)
	}
	release()
	for deadline := time.Now().Add(time.Minute); c.backlog.Load() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("backlog stuck at %d", c.backlog.Load())
		}
	}
	if c.tokenized.Load()-tokenized > 1<<20 {
		t.Errorf("the abandoned count's queued pieces were tokenized (%d bytes), not dropped", c.tokenized.Load()-tokenized)
	}
	c.budget = time.Minute
	if got, want := c.Count(context.Background(), "gpt-4o", second).N, direct(t, "o200k_base", string(second)); got != want {
		t.Fatalf("refused body counted %d later, direct %d", got, want)
	}
}
