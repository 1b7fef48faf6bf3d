package wsrelay

import (
	"bytes"
	"strings"
	"testing"
)

// With Dropped set, a diverted message that outgrows the bound is left
// out whole: none of its frames is written (control frames between its
// fragments still are), Dropped gets the start of its payload, and the
// messages after it are diverted or written as before. A message not
// claimed is written as it came whatever its size.
func TestTapDropOver(t *testing.T) {
	sframe := func(fin bool, op byte, p string) []byte { return AppendFrame(nil, fin, op, false, key, []byte(p)) }
	big := strings.Repeat("z", 200)
	long := strings.Repeat("y", 600)
	for _, tc := range []struct {
		name     string
		in       []byte
		claim    []bool
		written  []byte
		diverted []string // "<drop:prefix>" for a dropped one
	}{
		{"over on a fragment, a ping between goes out",
			join(sframe(false, OpText, "ab"), sframe(true, OpPing, "p"), sframe(true, OpContinuation, big), sframe(true, OpText, "c")), []bool{true, true},
			sframe(true, OpPing, "p"), []string{"<drop:ab" + big + ">", "c"}},
		{"over on its first frame",
			join(sframe(true, OpText, big), sframe(true, OpText, "c")), []bool{true, false},
			sframe(true, OpText, "c"), []string{"<drop:" + big + ">"}},
		{"the prefix is bounded",
			join(sframe(false, OpText, long[:300]), sframe(true, OpContinuation, long[300:])), []bool{true},
			nil, []string{"<drop:" + long[:PassedPrefix] + ">"}},
		{"a message not claimed goes out whatever its size",
			join(sframe(true, OpText, big), sframe(true, OpText, "c")), []bool{false, true},
			sframe(true, OpText, big), []string{"c"}},
	} {
		for _, step := range []int{1, 3, 7, len(tc.in)} {
			var w bytes.Buffer
			var div []string
			n := 0
			tap := &Tap{W: &w, Max: 100,
				Divert:   func() bool { n++; return n <= len(tc.claim) && tc.claim[n-1] },
				Diverted: func(m []byte) { div = append(div, string(m)) },
				Dropped:  func(p []byte) { div = append(div, "<drop:"+string(p)+">") }}
			if tc.name == "the prefix is bounded" {
				tap.Max = 400
			}
			for b := tc.in; len(b) > 0; {
				k := min(step, len(b))
				if got, err := tap.Write(b[:k]); err != nil || got != k {
					t.Fatalf("%s: Write = %d, %v", tc.name, got, err)
				}
				b = b[k:]
			}
			if !bytes.Equal(w.Bytes(), tc.written) {
				t.Errorf("%s (step %d): wrote %q, want %q", tc.name, step, w.Bytes(), tc.written)
			}
			if strings.Join(div, "|") != strings.Join(tc.diverted, "|") {
				t.Errorf("%s (step %d): diverted %q, want %q", tc.name, step, div, tc.diverted)
			}
		}
	}
}
