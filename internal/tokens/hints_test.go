package tokens

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
)

// messageStarts returns the offset of every `{"role"` in body: the hints
// the compiler gives for a chat body.
func messageStarts(body []byte) []int {
	var hints []int
	for i := 0; ; {
		j := bytes.Index(body[i:], []byte(`{"role"`))
		if j < 0 {
			return hints
		}
		hints = append(hints, i+j)
		i += j + 1
	}
}

// TestSegmentsCutAtAllowedPositions: segments tile the body, every cut is
// an allowed one, and a resent history yields the same segments before
// the new content.
func TestSegmentsCutAtAllowedPositions(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	hist := history(r, 200_000)
	prev := chatBody("gpt-4o", hist)
	next := chatBody("gpt-4o", append(hist, msg{Role: "tool", ToolCallID: "call_new", Content: genToolResult(r, 20_000)}))
	cutsOf := func(b []byte) []int {
		var cuts []int
		pos := 0
		segments(b, messageStarts(b), func(s []byte) {
			if !bytes.Equal(s, b[pos:pos+len(s)]) {
				t.Fatalf("segment at %d is not the body's bytes", pos)
			}
			pos += len(s)
			if pos < len(b) {
				if !cutOK(b, pos) {
					t.Fatalf("cut at %d is not allowed: %q|%q", pos, b[pos-1], b[pos])
				}
				cuts = append(cuts, pos)
			}
		})
		if pos != len(b) {
			t.Fatalf("segments cover %d of %d bytes", pos, len(b))
		}
		return cuts
	}
	a, b := cutsOf(prev), cutsOf(next)
	if len(a) < len(hist)/2 {
		t.Fatalf("%d cuts for %d messages", len(a), len(hist))
	}
	// The previous body's last segment runs into its closing bytes; every
	// cut before it is a cut of the next body too.
	for i, p := range a {
		if i >= len(b) || b[i] != p {
			t.Fatalf("cut %d: %d in the previous body, not in the next (%v)", i, p, b[:min(len(b), i+1)])
		}
	}
}

// TestHintedEqualsDirect: hints never change a count, whether they are
// message starts, arbitrary offsets, unsorted, out of range or none.
func TestHintedEqualsDirect(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	body := chatBody("gpt-4o", history(r, 60_000))
	random := make([]int, 200)
	for i := range random {
		random[i] = r.IntN(len(body)+20) - 10
	}
	for _, enc := range encNames {
		want := direct(t, enc, string(body))
		c := newCounter(t, enc)
		for name, hints := range map[string][]int{
			"messages": messageStarts(body), "random": random, "none": nil, "every byte": seqInts(len(body)),
		} {
			for pass := range 2 { // cold, then from the segment cache
				if got := c.CountHinted(context.Background(), "", body, hints); got.N != want {
					t.Fatalf("%s, %s hints, pass %d: %+v, direct %d", enc, name, pass, got, want)
				}
			}
		}
	}
}

// TestHintedResendIsLookups: after a hinted count, every segment of the
// body is cached whole, so the resent body needs one lookup per segment.
func TestHintedResendIsLookups(t *testing.T) {
	body := chatBody("gpt-4o", history(rand.New(rand.NewPCG(35, 36)), 100_000))
	hints := messageStarts(body)
	c := newCounter(t, "o200k_base")
	want := c.CountHinted(context.Background(), "", body, hints)
	if want.Status != StatusEstimate {
		t.Fatalf("count: %+v", want)
	}
	n := 0
	segments(body, hints, func(s []byte) {
		n++
		if _, ok := c.cache.get(keyOf(encodingNamed("o200k_base").id, s)); !ok {
			t.Fatalf("segment %d (%d bytes) not cached", n, len(s))
		}
	})
	if n < 3 {
		t.Fatalf("%d segments", n)
	}
}

func seqInts(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func FuzzHintedEqualsDirect(f *testing.F) {
	f.Add([]byte(`{"role":"user","content":"hi there"},{"role":"tool","content":"don't  stop"}`), []byte{0, 5, 40})
	f.Add([]byte("a b c d e f g h"), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	counters := map[string]*Counter{}
	for _, enc := range encNames {
		counters[enc] = newCounter(f, enc)
	}
	f.Fuzz(func(t *testing.T, b, hintBytes []byte) {
		var hints []int
		for _, h := range hintBytes {
			hints = append(hints, int(h)*len(b)/255)
		}
		for enc, c := range counters {
			got := c.CountHinted(context.Background(), "", b, hints)
			if want := direct(t, enc, string(b)); got.N != want && got.Status != StatusBudget {
				t.Fatalf("%s: hinted %+v, direct %d, input %q, hints %v", enc, got, want, b, hints)
			}
		}
	})
}
