package wsrelay

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// BenchmarkReader relays a stream of client messages (64 KiB text
// messages, each rewritten, with a ping between them), plain and with
// injection enabled (the pump goroutine the recovery loop needs).
func BenchmarkReader(b *testing.B) {
	msg := cframe(true, OpText, "rw:"+strings.Repeat("x", 64<<10))
	in := bytes.Repeat(join(msg, cframe(true, OpPing, "p")), 16)
	for _, inject := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "inject"}[inject], func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				r := NewReader(bytes.NewReader(in), 1<<20, upper)
				if inject {
					r.EnableInject()
				}
				if _, err := io.Copy(io.Discard, r); err != nil {
					b.Fatal(err)
				}
				r.Close()
			}
		})
	}
}
