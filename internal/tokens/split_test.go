package tokens

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

var encNames = []string{"o200k_base", "cl100k_base"}

// checkComposition asserts that the sum over pieces equals the direct count,
// for pieces cut at every allowed position and for the production chunking.
func checkComposition(t *testing.T, b []byte) {
	t.Helper()
	for _, enc := range encNames {
		want := direct(t, enc, string(b))
		if got, _ := composed(t, enc, b, 1, 0); got != want {
			t.Fatalf("%s: cut everywhere allowed: %d tokens, direct %d, input %q", enc, got, want, b)
		}
		if got, _ := composed(t, enc, b, minPiece, avgBits); got != want {
			t.Fatalf("%s: chunked: %d tokens, direct %d, input %q", enc, got, want, b)
		}
	}
}

func FuzzComposedEqualsDirect(f *testing.F) {
	for _, s := range []string{
		"", "a b", "don't stop", "a 'b' c's", "x\n\ny", "foo  bar   baz", "word\\nword",
		`{"role":"user","content":"hi there"}`, "12345 678,9", "日本 語a b", "e\u0301 a\u0301b",
		"trailing   ", "a\t\tb\r\nc", "a\u00a0b", "it'S IT'll", "a'", "ab''cd",
		"a\xffb", "x \xe6\x97 y", "word\xc3(", "'\xed\xa0\x80s", "12\x80", "\xef\xbf\xbd \xff",
	} {
		f.Add([]byte(s))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		f.Add([]byte(genText(r, 300)))
	}
	counters := map[string]*Counter{}
	for _, enc := range encNames {
		counters[enc] = newCounter(f, enc) // shared: the cache and memo fill up
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkComposition(t, b)
		for enc, c := range counters { // pieces, memo parts, cache, workers
			got := c.Count(context.Background(), "", b)
			if want := direct(t, enc, string(b)); got.N != want && got.Status != StatusBudget {
				t.Fatalf("%s: counter %+v, direct %d, input %q", enc, got, want, b)
			}
		}
	})
}

// TestComposedRandom runs the composition check on larger generated inputs
// than the fuzz seeds, so the production chunking makes several pieces.
func TestComposedRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	n := 40
	if testing.Short() || raceEnabled {
		n = 8
	}
	for i := range n {
		var b []byte
		if i%2 == 0 {
			b = []byte(genText(r, 2000+r.IntN(8000)))
		} else {
			b = chatBody("gpt-4o", history(r, 40000))[:20000+r.IntN(20000)]
		}
		checkComposition(t, b)
	}
}

// TestNaiveCutsAreNotExact shows the cut rule matters: cutting elsewhere (a
// message start, inside whitespace, before an apostrophe, between letters)
// changes the count, so additivity is not free.
func TestNaiveCutsAreNotExact(t *testing.T) {
	for _, c := range []struct{ a, b, enc string }{
		{`{"x":1}`, `,{"role":"user"}`, "o200k_base"},
		{"a ", "\nb", "cl100k_base"},
		{"don", "'t", "o200k_base"},
		{"hel", "lo", "cl100k_base"},
	} {
		if cutOK([]byte(c.a+c.b), len(c.a)) {
			t.Errorf("%q|%q: cut unexpectedly allowed", c.a, c.b)
		}
		whole := direct(t, c.enc, c.a+c.b)
		if sum := direct(t, c.enc, c.a) + direct(t, c.enc, c.b); sum == whole {
			t.Errorf("%q|%q: naive cut happened to be exact (%d); pick another example", c.a, c.b, whole)
		}
	}
}

// TestCorpusComposedEqualsDirect counts every corpus body with the Counter
// (pieces, cache, workers) and compares with a direct count of the body.
func TestCorpusComposedEqualsDirect(t *testing.T) {
	bodies := corpusBodies(t, !testing.Short() && !raceEnabled)
	for _, enc := range encNames {
		c := newCounter(t, enc) // one counter: steps reuse earlier pieces
		for name, b := range bodies {
			if raceEnabled && !strings.Contains(name, "tau-bench") {
				continue // the race detector makes tiktoken ~10x slower
			}
			want := direct(t, enc, string(b))
			got := c.Count(context.Background(), "", b)
			if got.N != want || got.Status != StatusEstimate {
				t.Errorf("%s %s: %+v, direct %d", enc, name, got, want)
			}
		}
		t.Logf("%s: %d bodies, %d cached pieces", enc, len(bodies), c.cache.len())
	}
}

func TestSplitPieceSizes(t *testing.T) {
	b := chatBody("gpt-4o", history(rand.New(rand.NewPCG(5, 6)), 1<<20))
	var n, small int
	var joined []byte
	split(b, minPiece, avgBits, func(p []byte) {
		n++
		if len(p) < minPiece {
			small++
		}
		joined = append(joined, p...)
	})
	if string(joined) != string(b) {
		t.Fatal("pieces do not reassemble the body")
	}
	if small > 1 || n < len(b)/(8<<avgBits) || n > len(b)/minPiece {
		t.Fatalf("%d pieces of %d bytes, %d short", n, len(b), small)
	}
	t.Logf("%d bytes -> %d pieces, avg %d", len(b), n, len(b)/n)
}

// splitBefore is split as it was before its loops were tightened: the cut
// positions (and so the cache keys) must not change.
func splitBefore(b []byte, minSize int, bits uint, emit func([]byte)) {
	for start := 0; start < len(b); {
		p := max(start+1, start+minSize-64)
		var h uint64
		for ; p < start+minSize && p < len(b); p++ {
			h = h<<1 + gear[b[p-1]]
		}
		for ; p < len(b); p++ {
			h = h<<1 + gear[b[p-1]]
			if h>>(64-bits) == 0 {
				break
			}
		}
		for p < len(b) && !cutOK(b, p) {
			p++
		}
		if p >= len(b) {
			p = len(b)
		}
		emit(b[start:p])
		start = p
	}
}

// TestSplitCutsUnchanged: split cuts where splitBefore cut, for the
// production sizes, the memo's (cut everywhere) and small ones.
func TestSplitCutsUnchanged(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	bodies := [][]byte{nil, []byte("a"), []byte("ab cd"), chatBody("gpt-4o", history(r, 300_000))}
	for range 50 {
		bodies = append(bodies, []byte(genText(r, r.IntN(5000))))
	}
	for _, b := range bodies {
		for _, sz := range []struct {
			min  int
			bits uint
		}{{minPiece, avgBits}, {1, 0}, {2, 1}, {64, 3}, {65, 4}, {100, 64}} {
			var got, want []int
			split(b, sz.min, sz.bits, func(p []byte) { got = append(got, len(p)) })
			splitBefore(b, sz.min, sz.bits, func(p []byte) { want = append(want, len(p)) })
			if !slices.Equal(got, want) {
				t.Fatalf("%d bytes, min %d bits %d: pieces %v, before %v", len(b), sz.min, sz.bits, got, want)
			}
		}
	}
}
