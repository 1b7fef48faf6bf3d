package compiler

import (
	"bytes"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/splice"
)

// TestTokenHintsFollowEdits: every hint of the original that no edit
// covers points, in the output, at the same bytes up to the next edit;
// every edit's bounds are hints of the output; both lists ascend.
func TestTokenHintsFollowEdits(t *testing.T) {
	body := fixtures.ChatBody("gpt-4o", fixtures.Turns(7, 12, 3000), "")
	d, reason := parseDoc(chatFormat{}, body, nil)
	if reason != "" {
		t.Fatal(reason)
	}
	if len(d.slots) < 4 {
		t.Fatalf("%d slots", len(d.slots))
	}
	for _, tc := range []struct {
		name  string
		edits []edit
	}{
		{"none", nil},
		{"receipts", []edit{
			{start: d.slots[0].start, end: d.slots[0].end, repl: []byte(`"r0"`)},
			{start: d.slots[2].start, end: d.slots[2].end, repl: []byte(`"a longer receipt than the value it replaces? no, shorter"`)},
		}},
		{"fold and empty edit", []edit{
			{start: d.units[1].Start, end: d.units[3].End, repl: []byte(`{"role":"user","content":"folded"}`)},
			{start: d.units[5].End, end: d.units[6].End},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := splice.Apply(body, tc.edits)
			if err != nil {
				t.Fatal(err)
			}
			raw, oh := tokenHints(d.doc, tc.edits)
			for _, hs := range [][]int{raw, oh} {
				for i := 1; i < len(hs); i++ {
					if hs[i] <= hs[i-1] {
						t.Fatalf("hints not ascending at %d: %v", i, hs)
					}
				}
			}
			if len(raw) != len(d.units)+2*len(d.slots) {
				t.Fatalf("%d raw hints for %d units and %d slots", len(raw), len(d.units), len(d.slots))
			}
			inOut := map[int]bool{}
			for _, h := range oh {
				if h < 0 || h > len(out) {
					t.Fatalf("hint %d outside the output (%d bytes)", h, len(out))
				}
				inOut[h] = true
			}
			delta := 0
			for _, e := range tc.edits {
				s := e.start + delta
				if !inOut[s] || !inOut[s+len(e.repl)] {
					t.Fatalf("edit at %d: bounds %d, %d are not hints", e.start, s, s+len(e.repl))
				}
				delta += len(e.repl) - (e.end - e.start)
			}
			for _, h := range raw {
				covered, next, delta := false, len(body), 0
				for _, e := range tc.edits {
					if e.end <= h {
						delta += len(e.repl) - (e.end - e.start)
						continue
					}
					covered = e.start < h
					next = e.start
					break
				}
				if covered {
					continue
				}
				if !inOut[h+delta] || !bytes.Equal(out[h+delta:h+delta+next-h], body[h:next]) {
					t.Fatalf("hint %d: not carried to the output at %d", h, h+delta)
				}
			}
		})
	}
}
