package wsrelay

import (
	"bytes"
	"strings"
	"testing"
)

// The tap diverts the text messages Divert claims, whole, and writes
// every other frame as it came, control frames between a diverted
// message's fragments included; a diverted message over the bound is
// written as it came and reported lost.
func TestTapDivert(t *testing.T) {
	sframe := func(fin bool, op byte, p string) []byte { return AppendFrame(nil, fin, op, false, key, []byte(p)) }
	big := strings.Repeat("z", 200)
	for _, tc := range []struct {
		name     string
		in       []byte
		claim    []bool   // Divert's answers, in order
		written  []byte   // what W gets
		diverted []string // what Diverted gets ("<nil>" for a lost one)
		observed []string // what On gets
	}{
		{"one diverted, one observed",
			join(sframe(true, OpText, `{"a":1}`), sframe(true, OpText, `{"b":2}`)), []bool{true, false},
			sframe(true, OpText, `{"b":2}`), []string{`{"a":1}`}, []string{`{"b":2}`}},
		{"a ping between diverted fragments goes out at once",
			join(sframe(false, OpText, "d1"), sframe(true, OpPing, "p"), sframe(true, OpContinuation, "d2"), sframe(true, OpBinary, "bin")), []bool{true},
			join(sframe(true, OpPing, "p"), sframe(true, OpBinary, "bin")), []string{"d1d2"}, nil},
		{"over the bound: written as it came, reported lost",
			join(sframe(false, OpText, "ab"), sframe(true, OpContinuation, big), sframe(true, OpText, "c")), []bool{true, true},
			join(sframe(false, OpText, "ab"), sframe(true, OpContinuation, big)), []string{"<nil>", "c"}, nil},
		{"an unreadable frame ends diverting: held bytes go out first",
			join(sframe(false, OpText, "ab"), []byte{0xC1, 0x00}, sframe(true, OpText, "c")), []bool{true},
			join(sframe(false, OpText, "ab"), []byte{0xC1, 0x00}, sframe(true, OpText, "c")), []string{"<nil>"}, nil},
	} {
		for _, step := range []int{1, 3, 7, len(tc.in)} {
			var w bytes.Buffer
			var div, obs []string
			n := 0
			tap := &Tap{W: &w, Max: 100, On: func(m []byte) { obs = append(obs, string(m)) },
				Divert: func() bool { n++; return n <= len(tc.claim) && tc.claim[n-1] },
				Diverted: func(m []byte) {
					if m == nil {
						div = append(div, "<nil>")
						return
					}
					div = append(div, string(m))
				}}
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
			if strings.Join(div, "|") != strings.Join(tc.diverted, "|") || strings.Join(obs, "|") != strings.Join(tc.observed, "|") {
				t.Errorf("%s (step %d): diverted %q observed %q", tc.name, step, div, obs)
			}
		}
	}
}

// FuzzTapDivert: a tap that diverts nothing writes and observes exactly
// what a plain tap does; one that diverts every text message hands over
// messages within the bound and never more bytes than came, whether it
// spills or drops what outgrows the bound.
func FuzzTapDivert(f *testing.F) {
	sframe := func(fin bool, op byte, p string) []byte { return AppendFrame(nil, fin, op, false, key, []byte(p)) }
	f.Add(join(sframe(false, OpText, "a"), sframe(true, OpPing, ""), sframe(true, OpContinuation, "b")), uint8(3))
	f.Add(join(sframe(true, OpBinary, "x"), sframe(true, OpText, strings.Repeat("y", 40))), uint8(1))
	f.Add([]byte{0x81, 0x7E, 0x00}, uint8(2))
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		k := int(step%16) + 1
		write := func(tap *Tap) {
			for b := in; len(b) > 0; {
				n := min(k, len(b))
				if _, err := tap.Write(b[:n]); err != nil {
					t.Fatal(err)
				}
				b = b[n:]
			}
		}
		var plainW, noneW, allW bytes.Buffer
		var plainOn, noneOn []string
		write(&Tap{W: &plainW, Max: 32, On: func(m []byte) { plainOn = append(plainOn, string(m)) }})
		write(&Tap{W: &noneW, Max: 32, On: func(m []byte) { noneOn = append(noneOn, string(m)) },
			Divert: func() bool { return false }, Diverted: func([]byte) { t.Fatal("diverted without a claim") }})
		if !bytes.Equal(plainW.Bytes(), in) || !bytes.Equal(noneW.Bytes(), in) || strings.Join(plainOn, "\x00") != strings.Join(noneOn, "\x00") {
			t.Fatal("a tap diverting nothing differs from a plain tap")
		}
		diverted := 0
		write(&Tap{W: &allW, Max: 32, Divert: func() bool { return true }, Diverted: func(m []byte) {
			if len(m) > 32 {
				t.Fatalf("diverted a message of %d bytes over the bound", len(m))
			}
			diverted += len(m)
		}})
		if allW.Len()+diverted > len(in) {
			t.Fatalf("wrote %d and diverted %d payload bytes of %d", allW.Len(), diverted, len(in))
		}
		// Dropping what outgrows the bound: never more bytes than came,
		// and a dropped message's prefix within PassedPrefix.
		var dropW bytes.Buffer
		diverted = 0
		write(&Tap{W: &dropW, Max: 32, Divert: func() bool { return true }, Diverted: func(m []byte) { diverted += len(m) },
			Dropped: func(p []byte) {
				if len(p) > PassedPrefix {
					t.Fatalf("a dropped message's prefix of %d bytes", len(p))
				}
			}})
		if dropW.Len()+diverted > len(in) {
			t.Fatalf("dropping: wrote %d and diverted %d payload bytes of %d", dropW.Len(), diverted, len(in))
		}
	})
}
