package compiler

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
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
			out, err := splice(body, tc.edits)
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

// insertInto gives what splicing the insertion gives: in place when the
// spare capacity holds it (spliceReserve leaves room), in a copy otherwise.
func TestInsertInto(t *testing.T) {
	src := []byte(`{"a":[1,2],"tools":[{"x":1}]}`)
	for _, tc := range []struct {
		name    string
		reserve int
		at      int // from the end of the rewrite
		ins     string
	}{
		{"at the start", 40, -1, `{"y":2},`},
		{"inside the tools array", 40, 2, `,{"y":2}`},
		{"at the end", 3, 0, `abc`},
		{"no reserve", 0, 2, strings.Repeat("z", 100)},
		{"too small a reserve", 40, 2, strings.Repeat("z", 100)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := spliceReserve(src, []edit{{start: 6, end: 7, repl: []byte(`"one"`)}}, tc.reserve)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != `{"a":["one",2],"tools":[{"x":1}]}` || cap(out) < len(out)+tc.reserve {
				t.Fatalf("spliceReserve = %s (cap %d)", out, cap(out))
			}
			at := len(out) - tc.at
			if tc.at < 0 {
				at = 0
			}
			e := edit{start: at, end: at, repl: []byte(tc.ins)}
			want, _ := splice(out, []edit{e})
			room, base := cap(out)-len(out) >= len(tc.ins), &out[:1][0]
			got := insertInto(out, e)
			if string(got) != string(want) {
				t.Fatalf("got %s, want %s", got, want)
			}
			if inPlace := &got[0] == base; inPlace != room {
				t.Fatalf("in place %v with room %v", inPlace, room)
			}
		})
	}
}
