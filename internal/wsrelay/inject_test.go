package wsrelay

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// injReader is a Reader with injection over a pipe the test writes the
// client's bytes into, read on its own goroutine as reverse_proxy's
// copier does.
type injReader struct {
	t   *testing.T
	r   *Reader
	pw  *io.PipeWriter
	out chan []byte
	got []byte
}

func newInjReader(t *testing.T, rw Rewrite) *injReader {
	pr, pw := io.Pipe()
	ir := &injReader{t: t, r: NewReader(pr, 100, rw), pw: pw, out: make(chan []byte, 64)}
	ir.r.EnableInject()
	t.Cleanup(ir.r.Close)
	go func() {
		defer close(ir.out)
		for {
			b := make([]byte, 7) // small reads: a message leaves in pieces
			n, err := ir.r.Read(b)
			if n > 0 {
				ir.out <- b[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	return ir
}

func (ir *injReader) client(fs ...[]byte) {
	if _, err := ir.pw.Write(join(fs...)); err != nil {
		ir.t.Fatal(err)
	}
}

// until reads the relay's output until it holds the frames of want (a
// guard against a hang, not a measure: it never fails a slow run that
// gets there).
func (ir *injReader) until(want []frame) {
	ir.t.Helper()
	guard := time.After(time.Minute)
	for {
		if have, ok := messages(ir.got, true); ok && len(have) >= len(want) {
			if !equalFrames(have, want) {
				ir.t.Fatalf("relay gave %v, want %v", short(have), short(want))
			}
			return
		}
		select {
		case b, ok := <-ir.out:
			if !ok {
				have, _ := messages(ir.got, true)
				ir.t.Fatalf("relay ended with %v, want %v", short(have), short(want))
			}
			ir.got = append(ir.got, b...)
		case <-guard:
			have, _ := messages(ir.got, true)
			ir.t.Fatalf("relay stuck at %v, want %v", short(have), short(want))
		}
	}
}

// untilBytes reads the relay's output until it holds n bytes.
func (ir *injReader) untilBytes(n int) {
	ir.t.Helper()
	guard := time.After(time.Minute)
	for len(ir.got) < n {
		select {
		case b, ok := <-ir.out:
			if !ok {
				ir.t.Fatalf("relay ended after %d bytes, want %d", len(ir.got), n)
			}
			ir.got = append(ir.got, b...)
		case <-guard:
			ir.t.Fatalf("relay stuck at %d bytes, want %d", len(ir.got), n)
		}
	}
}

func (ir *injReader) inject(msg string) func() bool {
	ir.t.Helper()
	cancel, ok := ir.r.Inject(ClientText([]byte(msg)))
	if !ok {
		ir.t.Fatal("injection refused")
	}
	return cancel
}

func TestInject(t *testing.T) {
	text := func(p string) frame { return frame{true, OpText, p} }
	ping := frame{true, OpPing, "p"}
	for _, tc := range []struct {
		name string
		run  func(ir *injReader)
		want []frame
	}{
		{"while the reader waits for the client", func(ir *injReader) {
			ir.client(cframe(true, OpText, "rw:a"))
			ir.until([]frame{text("RW:A")})
			ir.inject("inj")
			ir.until([]frame{text("RW:A"), text("inj")})
			ir.client(cframe(true, OpText, "b"))
		}, []frame{text("RW:A"), text("inj"), text("b")}},
		{"between fragments of a streamed message it waits", func(ir *injReader) {
			ir.client(cframe(false, OpBinary, "x"), cframe(true, OpPing, "p"))
			ir.untilBytes(len(cframe(false, OpBinary, "x")) + len(cframe(true, OpPing, "p")))
			ir.inject("inj")
			ir.client(cframe(true, OpContinuation, "y"))
		}, []frame{ping, {true, OpBinary, "xy"}, text("inj")}},
		{"between fragments of a held message it waits", func(ir *injReader) {
			// The first fragment goes out with the held message, after a
			// streamed one the test sees first: the reader is inside the
			// held message when the injection comes.
			ir.client(cframe(true, OpBinary, "s"), cframe(false, OpText, "rw:a"))
			ir.untilBytes(len(cframe(true, OpBinary, "s")))
			ir.client(cframe(true, OpPing, "p"))
			ir.inject("inj")
			ir.client(cframe(true, OpContinuation, "b"))
		}, nil},
		{"with interleaved pings", func(ir *injReader) {
			ir.client(cframe(true, OpPing, "p"))
			ir.until([]frame{ping})
			ir.inject("inj1")
			ir.inject("inj2")
			ir.until([]frame{ping, text("inj1"), text("inj2")})
			ir.client(cframe(true, OpPing, "p"), cframe(true, OpText, "c"))
		}, []frame{ping, text("inj1"), text("inj2"), ping, text("c")}},
		{"a withdrawn injection never goes out", func(ir *injReader) {
			ir.client(cframe(false, OpText, "a"))
			cancel := ir.inject("inj")
			if !cancel() {
				ir.t.Fatal("a queued injection could not be withdrawn")
			}
			ir.client(cframe(true, OpContinuation, "b"))
		}, []frame{text("ab")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ir := newInjReader(t, upper)
			tc.run(ir)
			ir.pw.Close()
			if tc.want == nil { // the held message: the injection before it or after it, whole
				for b := range ir.out {
					ir.got = append(ir.got, b...)
				}
				have, ok := messages(ir.got, true)
				if !ok || len(have) != 4 || have[0] != (frame{true, OpBinary, "s"}) || have[2] != text("RW:AB") && have[3] != text("RW:AB") {
					t.Fatalf("relay gave %v (valid %v)", short(have), ok)
				}
				return
			}
			ir.until(tc.want)
			for range ir.out {
				t.Fatal("bytes after the expected frames")
			}
		})
	}
}

// A relay that switched to a plain copy, or whose client ended, injects
// nothing, and drops what was queued.
func TestInjectRefused(t *testing.T) {
	if _, ok := NewReader(strings.NewReader(""), 10, upper).Inject([]byte("x")); ok {
		t.Fatal("a reader without injection accepted one")
	}
	ir := newInjReader(t, upper)
	ir.client(cframe(false, OpBinary, "a"))
	ir.untilBytes(len(cframe(false, OpBinary, "a"))) // inside a message: the injection waits
	ir.inject("queued")
	bad := []byte{0xC1, 0x80, 0, 0, 0, 0} // reserved bits: a plain copy for good
	ir.client(bad)
	ir.pw.Close()
	got := ir.got
	for b := range ir.out {
		got = append(got, b...)
	}
	if want := join(cframe(false, OpBinary, "a"), bad); !bytes.Equal(got, want) {
		t.Fatalf("plain copy gave %q, want %q", got, want)
	}
	if _, ok := ir.r.Inject(ClientText([]byte("late"))); ok {
		t.Fatal("a plain copy accepted an injection")
	}
}

// FuzzReaderInject: with injections queued before and while the client's
// frames arrive, the output is valid frames carrying the client's
// messages, rewritten where asked, in order, with each injected message
// whole between them; an input the relay copies plainly comes out byte
// for byte after what was injected before.
func FuzzReaderInject(f *testing.F) {
	f.Add(join(cframe(true, OpText, "rw:a"), cframe(true, OpPing, "p")), uint8(2), uint8(1))
	f.Add(join(cframe(false, OpText, "rw:a"), cframe(true, OpPing, "p"), cframe(true, OpContinuation, "b")), uint8(1), uint8(5))
	f.Add(join(cframe(false, OpBinary, "x"), cframe(true, OpContinuation, "y"), cframe(true, OpClose, "\x03\xe8")), uint8(3), uint8(2))
	f.Add([]byte{0xC1, 0x80, 0, 0, 0, 0}, uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, n, split uint8) {
		n %= 4
		pr, pw := io.Pipe()
		r := NewReader(pr, 64, upper)
		r.EnableInject()
		defer r.Close()
		for i := range int(n) {
			r.Inject(ClientText([]byte("inj:" + string(rune('0'+i)))))
		}
		go func() {
			at := min(int(split), len(in))
			pw.Write(in[:at])
			r.Inject(ClientText([]byte("inj:late")))
			pw.Write(in[at:])
			pw.Close()
		}()
		got, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		want, ok := messages(in, true)
		if !ok {
			return // a plain copy at some point: checked by FuzzReader
		}
		have, ok := messages(got, true)
		if !ok {
			t.Fatalf("output is not valid frames")
		}
		var client []frame
		injected := 0
		for _, m := range have {
			if m.op == OpText && strings.HasPrefix(m.p, "inj:") {
				injected++
				continue
			}
			client = append(client, m)
		}
		if injected > int(n)+1 || injected < int(n) {
			t.Fatalf("%d injected messages, queued %d (+1 late)", injected, n)
		}
		if len(client) != len(want) {
			t.Fatalf("%d client messages, want %d", len(client), len(want))
		}
		for i, w := range want {
			if w.op == OpText && strings.HasPrefix(w.p, "rw:") && len(w.p) <= 64 && utf8Valid(w.p) {
				w.p = strings.ToUpper(w.p)
			}
			if client[i] != w {
				t.Fatalf("message %d: %q, want %q", i, client[i].p, w.p)
			}
		}
	})
}
