package splice

import (
	"strings"
	"testing"
)

type edit struct {
	start, end int
	repl       []byte
}

func (e edit) Span() (int, int, []byte) { return e.start, e.end, e.repl }

func TestApply(t *testing.T) {
	src := []byte(`{"a":"xyz","b":[1,2]}`)
	for _, tc := range []struct {
		name  string
		edits []edit
		want  string
	}{
		{"none", nil, `{"a":"xyz","b":[1,2]}`},
		{"one", []edit{{5, 10, []byte(`"r"`)}}, `{"a":"r","b":[1,2]}`},
		{"unsorted", []edit{{16, 19, []byte(`3`)}, {5, 10, []byte(`1`)}}, `{"a":1,"b":[3]}`},
		{"adjacent", []edit{{5, 10, []byte(`1`)}, {10, 10, []byte(`,"c":0`)}}, `{"a":1,"c":0,"b":[1,2]}`},
		{"at both ends", []edit{{0, 0, []byte(`[`)}, {21, 21, []byte(`]`)}}, `[{"a":"xyz","b":[1,2]}]`},
		{"delete", []edit{{1, 11, nil}}, `{"b":[1,2]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Apply(src, tc.edits)
			if err != nil || string(out) != tc.want {
				t.Fatalf("Apply = %s, %v; want %s", out, err, tc.want)
			}
		})
	}
}

// Edits out of range, reversed or overlapping are refused with an error,
// never a panic or bytes of the source repeated or lost.
func TestApplyRefusesBadEdits(t *testing.T) {
	src := []byte(`{"a":"xyz","b":[1,2]}`)
	for _, tc := range []struct {
		name  string
		edits []edit
	}{
		{"negative start", []edit{{-1, 2, nil}}},
		{"end past the source", []edit{{5, 22, nil}}},
		{"start past the source", []edit{{30, 30, []byte(`x`)}}},
		{"reversed", []edit{{10, 5, []byte(`x`)}}},
		{"overlapping", []edit{{5, 10, []byte(`1`)}, {8, 12, []byte(`2`)}}},
		{"nested", []edit{{1, 20, nil}, {5, 10, []byte(`1`)}}},
		{"same range twice", []edit{{5, 10, []byte(`1`)}, {5, 10, []byte(`2`)}}},
		{"insertion inside another edit", []edit{{5, 10, []byte(`1`)}, {7, 7, []byte(`2`)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, extra := range []int{0, 16} {
				out, err := Reserve(src, tc.edits, extra)
				if err == nil || out != nil {
					t.Fatalf("Reserve(%v) = %q, %v; want an error", tc.edits, out, err)
				}
			}
		})
	}
	if _, err := Insert([]byte(`ab`), 3, []byte(`x`)); err == nil {
		t.Fatal("Insert past the end accepted")
	}
	if _, err := Insert([]byte(`ab`), -1, []byte(`x`)); err == nil {
		t.Fatal("Insert before the start accepted")
	}
}

// Insert gives what splicing the insertion gives: in place when the spare
// capacity holds it (Reserve leaves room), in a copy otherwise.
func TestInsert(t *testing.T) {
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
			out, err := Reserve(src, []edit{{start: 6, end: 7, repl: []byte(`"one"`)}}, tc.reserve)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != `{"a":["one",2],"tools":[{"x":1}]}` || cap(out) < len(out)+tc.reserve {
				t.Fatalf("Reserve = %s (cap %d)", out, cap(out))
			}
			at := len(out) - tc.at
			if tc.at < 0 {
				at = 0
			}
			want, _ := Apply(out, []edit{{start: at, end: at, repl: []byte(tc.ins)}})
			room, base := cap(out)-len(out) >= len(tc.ins), &out[:1][0]
			got, err := Insert(out, at, []byte(tc.ins))
			if err != nil || string(got) != string(want) {
				t.Fatalf("got %s, %v; want %s", got, err, want)
			}
			if inPlace := &got[0] == base; inPlace != room {
				t.Fatalf("in place %v with room %v", inPlace, room)
			}
		})
	}
}

func FuzzApply(f *testing.F) {
	f.Add([]byte(`{"a":1}`), 1, 4, 3, 6)
	f.Fuzz(func(t *testing.T, src []byte, s1, e1, s2, e2 int) {
		edits := []edit{{s1, e1, []byte(`A`)}, {s2, e2, []byte(`BB`)}}
		out, err := Apply(src, edits)
		if err != nil {
			return
		}
		// Accepted: in range, ordered, disjoint; the bytes outside are kept.
		a, b := edits[0], edits[1]
		if a.start < 0 || a.start > a.end || b.start < a.end || b.start > b.end || b.end > len(src) {
			t.Fatalf("accepted %v on %d bytes", edits, len(src))
		}
		want := string(src[:a.start]) + string(a.repl) + string(src[a.end:b.start]) + string(b.repl) + string(src[b.end:])
		if string(out) != want {
			t.Fatalf("got %q, want %q", out, want)
		}
	})
}
