package wsrelay

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

var key = [4]byte{1, 2, 3, 4}

func cframe(fin bool, op byte, p string) []byte {
	return AppendFrame(nil, fin, op, true, key, []byte(p))
}

func join(fs ...[]byte) []byte { return bytes.Join(fs, nil) }

// frames decodes a client stream into its frames' (op, fin, unmasked
// payload), failing on anything malformed.
type frame struct {
	fin bool
	op  byte
	p   string
}

func decode(t *testing.T, b []byte, masked bool) []frame {
	t.Helper()
	var out []frame
	for len(b) > 0 {
		h, ok, err := ParseHeader(b)
		if !ok || err != nil || int64(len(b)) < int64(h.Size)+h.Length || h.Masked != masked {
			t.Fatalf("malformed frame at %q", b)
		}
		p := bytes.Clone(b[h.Size : int64(h.Size)+h.Length])
		if h.Masked {
			MaskBytes(h.Key, 0, p)
		}
		out = append(out, frame{h.Fin, h.Op, string(p)})
		b = b[int64(h.Size)+h.Length:]
	}
	return out
}

// upper rewrites messages starting with "rw:" to their upper case.
func upper(msg []byte) ([]byte, bool) {
	if !bytes.HasPrefix(msg, []byte("rw:")) {
		return nil, false
	}
	return bytes.ToUpper(msg), true
}

func relay(t *testing.T, in []byte, max int64, rw Rewrite, oneByte bool) []byte {
	t.Helper()
	var src io.Reader = bytes.NewReader(in)
	if oneByte {
		src = iotest.OneByteReader(src)
	}
	out, err := io.ReadAll(NewReader(src, max, rw))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReader(t *testing.T) {
	big := strings.Repeat("x", 70000)
	for _, tc := range []struct {
		name string
		in   []byte
		max  int64
		want []frame // nil: the input byte for byte
	}{
		{"declined text", cframe(true, OpText, "hello"), 100, nil},
		{"rewritten text", cframe(true, OpText, "rw:abc"), 100, []frame{{true, OpText, "RW:ABC"}}},
		{"binary untouched", cframe(true, OpBinary, "rw:abc"), 100, nil},
		{"fragmented with ping and pong", join(cframe(false, OpText, "rw:a"), cframe(true, OpPing, "p"),
			cframe(false, OpContinuation, "b"), cframe(true, OpPong, "q"), cframe(true, OpContinuation, "c")), 100,
			[]frame{{true, OpPing, "p"}, {true, OpPong, "q"}, {true, OpText, "RW:ABC"}}},
		{"fragmented declined keeps its frames", join(cframe(false, OpText, "a"), cframe(true, OpPing, "p"), cframe(true, OpContinuation, "b")), 100, nil},
		{"over the bound at once", cframe(true, OpText, "rw:"+big), 100, nil},
		{"over the bound in fragments", join(cframe(false, OpText, "rw:aaaa"), cframe(false, OpContinuation, "bbbb"), cframe(true, OpContinuation, "cccc"), cframe(true, OpText, "rw:z")), 10,
			append(decodeNoT(join(cframe(false, OpText, "rw:aaaa"), cframe(false, OpContinuation, "bbbb"), cframe(true, OpContinuation, "cccc"))), frame{true, OpText, "RW:Z"})},
		{"invalid UTF-8", cframe(true, OpText, "rw:\xff\xfe"), 100, nil},
		{"close code passes", join(cframe(true, OpText, "rw:x"), cframe(true, OpClose, "\x03\xf1bye")), 100, []frame{{true, OpText, "RW:X"}, {true, OpClose, "\x03\xf1bye"}}},
		{"long text rewritten", cframe(true, OpText, "rw:"+big), 1 << 20, []frame{{true, OpText, "RW:" + strings.ToUpper(big)}}},
		{"reserved bits: raw for good", join([]byte{0xC1, 0x80, 0, 0, 0, 0}, cframe(true, OpText, "rw:x")), 100, nil},
		{"unmasked client frame: raw for good", join(AppendFrame(nil, true, OpText, false, key, []byte("rw:x")), cframe(true, OpText, "rw:y")), 100, nil},
		{"continuation without a message: raw", join(cframe(true, OpContinuation, "x"), cframe(true, OpText, "rw:y")), 100, nil},
		{"truncated payload", cframe(true, OpText, "rw:hello")[:8], 100, nil},
		{"truncated header", cframe(true, OpText, strings.Repeat("y", 300))[:3], 1000, nil},
	} {
		for _, one := range []bool{false, true} {
			got := relay(t, tc.in, tc.max, upper, one)
			if tc.want == nil {
				if !bytes.Equal(got, tc.in) {
					t.Errorf("%s (one byte %v): not byte for byte", tc.name, one)
				}
				continue
			}
			if d := decode(t, got, true); !equalFrames(d, tc.want) {
				t.Errorf("%s (one byte %v): got %v, want %v", tc.name, one, short(d), short(tc.want))
			}
		}
	}
}

func decodeNoT(b []byte) []frame {
	var out []frame
	for len(b) > 0 {
		h, _, _ := ParseHeader(b)
		p := bytes.Clone(b[h.Size : int64(h.Size)+h.Length])
		MaskBytes(h.Key, 0, p)
		out = append(out, frame{h.Fin, h.Op, string(p)})
		b = b[int64(h.Size)+h.Length:]
	}
	return out
}

func equalFrames(a, b []frame) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func short(fs []frame) []frame {
	out := make([]frame, len(fs))
	for i, f := range fs {
		if len(f.p) > 20 {
			f.p = f.p[:20] + "…"
		}
		out[i] = f
	}
	return out
}

func TestTap(t *testing.T) {
	sframe := func(fin bool, op byte, p string) []byte { return AppendFrame(nil, fin, op, false, key, []byte(p)) }
	in := join(sframe(true, OpText, `{"type":"a"}`), sframe(false, OpText, "b1"), sframe(true, OpPing, ""),
		sframe(true, OpContinuation, "b2"), sframe(true, OpBinary, "bin"), sframe(true, OpText, strings.Repeat("z", 200)),
		sframe(true, OpText, ""), sframe(true, OpClose, "\x03\xe8"))
	for _, step := range []int{1, 3, 7, len(in)} {
		var w bytes.Buffer
		var got []string
		tap := &Tap{W: &w, Max: 100, On: func(m []byte) { got = append(got, string(m)) }}
		for b := in; len(b) > 0; {
			k := min(step, len(b))
			if _, err := tap.Write(b[:k]); err != nil {
				t.Fatal(err)
			}
			b = b[k:]
		}
		if !bytes.Equal(w.Bytes(), in) {
			t.Fatal("tap changed bytes")
		}
		want := []string{`{"type":"a"}`, "b1b2", ""}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("step %d: observed %q", step, got)
		}
	}
}

// FuzzReader: declining every message, any input comes out byte for byte;
// rewriting, a valid frame sequence comes out as valid frames carrying
// the same messages, rewritten where asked, in order.
func FuzzReader(f *testing.F) {
	f.Add(cframe(true, OpText, "rw:a"), uint16(100))
	f.Add(join(cframe(false, OpText, "rw:a"), cframe(true, OpPing, "p"), cframe(true, OpContinuation, "b")), uint16(3))
	f.Add(join(cframe(true, OpBinary, "x"), cframe(true, OpClose, "\x03\xe8")), uint16(10))
	f.Add([]byte{0x81, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 1}, uint16(10))
	f.Fuzz(func(t *testing.T, in []byte, max uint16) {
		never := func([]byte) ([]byte, bool) { return nil, false }
		if got := relay(t, in, int64(max), never, false); !bytes.Equal(got, in) {
			t.Fatal("declining relay changed bytes")
		}
		want, ok := messages(in, true)
		if !ok {
			return
		}
		got := relay(t, in, int64(max), upper, true)
		have, ok := messages(got, true)
		if !ok {
			t.Fatalf("rewritten stream is not valid frames")
		}
		if len(have) != len(want) {
			t.Fatalf("%d messages, want %d", len(have), len(want))
		}
		for i := range want {
			w := want[i]
			if w.op == OpText && strings.HasPrefix(w.p, "rw:") && len(w.p) <= int(max) && utf8Valid(w.p) {
				w.p = strings.ToUpper(w.p)
			}
			if have[i] != w {
				t.Fatalf("message %d: %q, want %q", i, have[i].p, w.p)
			}
		}
	})
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// messages assembles a stream of valid client frames into its messages
// and control frames (fin is unused); ok false for anything else.
func messages(b []byte, masked bool) (out []frame, ok bool) {
	var cur *frame
	for len(b) > 0 {
		h, ok, err := ParseHeader(b)
		if !ok || err != nil || int64(len(b)-h.Size) < h.Length || !clientValid(h, cur != nil) {
			return nil, false
		}
		p := bytes.Clone(b[h.Size : int64(h.Size)+h.Length])
		MaskBytes(h.Key, 0, p)
		b = b[int64(h.Size)+h.Length:]
		switch {
		case h.Control():
			out = append(out, frame{true, h.Op, string(p)})
		case h.Op == OpContinuation:
			cur.p += string(p)
		default:
			cur = &frame{true, h.Op, string(p)}
		}
		if !h.Control() && h.Fin {
			out = append(out, *cur)
			cur = nil
		}
	}
	return out, cur == nil
}
