package tokens

import (
	"math/rand/v2"
	"testing"
)

// TestHotCountsAnswersAsTheMerge: for every token of both encodings up to
// eight bytes and for byte-changed neighbours of each (most not tokens),
// looked up in an order that evicts and hits, the hot table answers what
// the rank table and the merge answer, empty or seeded.
func TestHotCountsAnswersAsTheMerge(t *testing.T) {
	for _, name := range []string{"o200k_base", "cl100k_base"} {
		r, err := encodingNamed(name).load()
		if err != nil {
			t.Fatal(err)
		}
		var pieces [][]byte
		rng := rand.New(rand.NewPCG(1, 2))
		for id := range len(r.off) - 1 {
			b := r.token(id)
			if len(b) < 2 || len(b) > 8 {
				continue
			}
			changed := append([]byte(nil), b...)
			changed[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
			pieces = append(pieces, b, changed, append(append([]byte(nil), b...), 0), b[:len(b)-1])
		}
		seeded := r.hot.get() // a new table starts as the encoding's seed
		filled := 0
		for _, e := range seeded.e {
			if e.n != 0 {
				filled++
			}
		}
		if filled < hotEntries/2 {
			t.Fatalf("%s: the seed fills %d of %d entries", name, filled, hotEntries)
		}
		for _, h := range []*hotCounts{new(hotCounts), seeded} {
			hits := 0
			for round := range 2 {
				rng.Shuffle(len(pieces), func(i, j int) { pieces[i], pieces[j] = pieces[j], pieces[i] })
				for i, p := range pieces {
					q := pieces[max(0, i-rng.IntN(8))] // often one just asked
					if _, hit := h.lookup(pack(q), len(q)); len(q) >= 2 && hit {
						hits++ // q's answer is in the table
					}
					for _, b := range [][]byte{p, q} {
						if len(b) < 2 {
							continue
						}
						if got, want := hotCount(h, r, b), r.count(b); got != want {
							t.Fatalf("%s, round %d: hot table says %d for %q, merge %d", name, round, got, b, want)
						}
					}
				}
			}
			if hits == 0 {
				t.Fatalf("%s: the hot table never answered", name)
			}
		}
	}
}

// hotCount is what the counting loop does with the table for a short
// pre-token b: its count from the table, or from the rank table and the
// merge, then remembered.
func hotCount(h *hotCounts, r *ranks, b []byte) int {
	v := pack(b)
	e, hit := h.lookup(v, len(b))
	if hit {
		return int(e.count)
	}
	n := r.count(b)
	e.remember(v, len(b), n)
	return n
}
