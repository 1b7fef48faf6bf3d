package compiler

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/splice"
)

// rewriteOf parses orig (a JSON array) with the text cache's Known, as a
// compile does, and splices a short string over each element in replace.
func rewriteOf(t *testing.T, orig []byte, replace map[int][]byte) (*knownStrings, []edit, []byte) {
	t.Helper()
	known := newKnownStrings(newTextCache(), "tenant")
	root, err := jsonv.ParseKnown(orig, 64, known)
	if err != nil {
		t.Skip("not JSON")
	}
	if root.Kind != jsonv.Array {
		t.Skip("not an array")
	}
	var edits []edit
	for i, el := range root.Elems {
		if repl, ok := replace[i]; ok {
			edits = append(edits, edit{start: el.Start, end: el.End, at: el.Start, repl: repl})
		}
	}
	out, err := splice.Reserve(orig, edits, 0)
	if err != nil {
		t.Fatal(err)
	}
	return known, edits, out
}

// sameAsParse checks that the rewrite's parse with unchangedStrings is the
// parse without it (the same tree, or the same error) and returns how many
// strings it skipped.
func sameAsParse(t *testing.T, orig, out []byte, known *knownStrings, edits []edit) int {
	t.Helper()
	counting := &countingKnown{Known: &unchangedStrings{orig: orig, strs: known.keys, edits: edits}}
	got, gerr := jsonv.ParseKnown(out, 64, counting)
	want, werr := jsonv.Parse(out, 64)
	if (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
		t.Fatalf("with unchangedStrings: %v; Parse: %v", gerr, werr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("with unchangedStrings the tree differs from Parse's")
	}
	return counting.hits
}

type countingKnown struct {
	jsonv.Known
	hits int
}

func (c *countingKnown) String(src []byte, start int) (int, bool, bool, bool) {
	end, esc, ascii, ok := c.Known.String(src, start)
	if ok {
		c.hits++
	}
	return end, esc, ascii, ok
}

// TestUnchangedStrings: the check's parse of a rewrite skips the long
// strings carried over unchanged, wherever the edits fall, and scans every
// string a wrong splice changed or moved.
func TestUnchangedStrings(t *testing.T) {
	long := func(c string) string { return `"` + strings.Repeat(c, jsonv.KnownMin+10) + `"` }
	orig := []byte(`[` + long("a") + `,` + long("b") + `,"short",` + long(`\"`) + `,` + long("é") + `]`)
	tests := []struct {
		name    string
		replace map[int][]byte
		corrupt func(out []byte) // applied to the rewrite; nil: none
		hits    int
	}{
		{"no edits", nil, nil, 4},
		{"the first replaced", map[int][]byte{0: []byte(`"r"`)}, nil, 3},
		{"grown, in the middle", map[int][]byte{2: []byte(`"` + strings.Repeat("g", 50) + `"`)}, nil, 4},
		{"every other", map[int][]byte{1: []byte(`"x"`), 3: []byte(`"y"`)}, nil, 2},
		{"all", map[int][]byte{0: []byte(`"1"`), 1: []byte(`"2"`), 2: []byte(`"3"`), 3: []byte(`"4"`), 4: []byte(`"5"`)}, nil, 0},
		{"a byte changed in a carried string", map[int][]byte{0: []byte(`"r"`)}, func(out []byte) {
			out[bytes.Index(out, []byte("bbbb"))] = 'c'
		}, 2},
		{"a carried string broken", map[int][]byte{0: []byte(`"r"`)}, func(out []byte) {
			out[bytes.Index(out, []byte("bbbb"))] = 0x01
		}, 0},
		{"a replacement equal to the original is scanned", map[int][]byte{1: []byte(long("b"))}, nil, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			known, edits, out := rewriteOf(t, orig, tc.replace)
			if tc.corrupt != nil {
				tc.corrupt(out)
			}
			if hits := sameAsParse(t, orig, out, known, edits); hits != tc.hits {
				t.Fatalf("%d strings skipped, want %d", hits, tc.hits)
			}
		})
	}
}

// FuzzUnchangedStrings: whatever the original, the edits and any byte the
// splice got wrong, the check's parse with unchangedStrings equals Parse.
// A '~' in the input stands for 600 bytes, so the fuzzer can make long
// strings; each byte of which selects an element to replace.
func FuzzUnchangedStrings(f *testing.F) {
	f.Add([]byte(`["~~x","~~\"y",1,"~~"]`), []byte{0, 2}, uint16(0), byte(0))
	f.Add([]byte(`["~~x",["~~"],"~~é"]`), []byte{1}, uint16(700), byte('"'))
	f.Add([]byte(`[{"a":"~~"},"~~\\"]`), []byte{}, uint16(1300), byte('\\'))
	expand := func(b []byte) []byte { return bytes.ReplaceAll(b, []byte("~"), bytes.Repeat([]byte(`é\n`), 150)) }
	f.Fuzz(func(t *testing.T, orig, which []byte, at uint16, to byte) {
		orig = expand(orig)
		replace := map[int][]byte{}
		for _, w := range which {
			replace[int(w%16)] = []byte(`"r` + strings.Repeat("x", int(w/16)) + `"`)
		}
		known, edits, out := rewriteOf(t, orig, replace)
		if to != 0 && len(out) > 0 {
			out[int(at)%len(out)] = to
		}
		sameAsParse(t, orig, out, known, edits)
	})
}
