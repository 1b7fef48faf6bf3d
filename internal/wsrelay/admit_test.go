package wsrelay

import (
	"bytes"
	"io"
	"testing"
)

// TestReaderAdmit: a text message Admit refuses (at its first frame or a
// later one) or that outgrows the bound goes on byte for byte, and
// Passed is shown the start of its payload; an admitted one is offered
// to the rewrite; Admit is asked the bytes holding each frame takes.
func TestReaderAdmit(t *testing.T) {
	long := string(bytes.Repeat([]byte("x"), 700))
	tests := []struct {
		name       string
		in         []byte
		max        int64
		budget     int64  // bytes Admit grants in all
		wantOut    []byte // nil: the message is rewritten
		wantPassed string // prefix Passed saw, "-" for no call
		wantOver   bool
	}{
		{"admitted", cframe(true, OpText, "rw:a"), 100, 100, nil, "-", false},
		{"refused at the first frame", cframe(true, OpText, "rw:abc"), 100, 3,
			cframe(true, OpText, "rw:abc"), "rw:abc", false},
		{"refused at a continuation", join(cframe(false, OpText, "rw:ab"), cframe(true, OpContinuation, "cd")), 100, 20,
			join(cframe(false, OpText, "rw:ab"), cframe(true, OpContinuation, "cd")), "rw:ab", false},
		{"over the bound", cframe(true, OpText, "rw:"+long), 100, 1 << 20,
			cframe(true, OpText, "rw:"+long), ("rw:" + long)[:PassedPrefix], true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			left := tt.budget
			passed, over := "-", false
			var asked []int64
			r := NewReader(bytes.NewReader(tt.in), tt.max, upper)
			r.Admit = func(n int64) bool {
				asked = append(asked, n)
				if n > left {
					return false
				}
				left -= n
				return true
			}
			r.Passed = func(p []byte, o bool) { passed, over = string(p), o }
			out, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantPassed == "-" {
				if f := decode(t, out, true); len(f) != 1 || f[0].p != "RW:A" {
					t.Fatalf("admitted message not rewritten: %+v", f)
				}
				if len(asked) != 1 || asked[0] != int64(len(tt.in))+4 {
					t.Fatalf("Admit asked %v for a %d-byte frame", asked, len(tt.in))
				}
			} else if !bytes.Equal(out, tt.wantOut) {
				t.Fatalf("out %q, want the input", out)
			}
			if passed != tt.wantPassed || over != tt.wantOver {
				t.Fatalf("Passed saw %q over=%v, want %q over=%v", passed, over, tt.wantPassed, tt.wantOver)
			}
			if r.Buffered() != 0 {
				t.Fatalf("%d bytes left buffered", r.Buffered())
			}
		})
	}
}
