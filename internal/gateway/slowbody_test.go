package gateway

import (
	"bytes"
	"io"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// readPumped reads a body whole through a pump, as readBody does (no
// Close: the handler forwards its own buffer afterwards).
func readPumped(t testing.TB, src []byte, into []byte) []byte {
	p := pump(io.NopCloser(bytes.NewReader(src)), time.Now().Add(time.Minute))
	got, over, busy, err := readAtMostInto(p, int64(len(src))+1, int64(len(src)), nil, func(int64) []byte { return into })
	if err != nil || over || busy {
		t.Fatalf("read %d bytes: over %v, busy %v, err %v", len(got), over, busy, err)
	}
	return got
}

// Bodies read one after the other through pumps that reuse each other's
// chunks come out byte for byte, at and around the chunk size.
func TestPumpRecycledChunksKeepBytes(t *testing.T) {
	sizes := []int{1, pumpChunk - 1, pumpChunk, pumpChunk + 1, 3*pumpChunk + 7, 1 << 20}
	for i, n := range sizes {
		src := make([]byte, n)
		for j := range src {
			src[j] = byte(i*31 + j*7)
		}
		if got := readPumped(t, src, nil); !bytes.Equal(got, src) {
			t.Fatalf("body %d (%d bytes): got %d bytes that differ", i, n, len(got))
		}
	}
}

// A body read to its end without a Close gives its chunks back, and its
// reads share one timer: a 1 MB body read through the pump allocates a
// few hundred bytes (without the recycling, two to four 32 KiB chunks went
// to the garbage collector; with a timer per read, about 9 KB).
func TestPumpRecyclesChunksAtEnd(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops a share of what sync.Pool is given")
	}
	// A collection empties every sync.Pool, and a pool's per-P slot is
	// not found from another P: neither during the count, so what is
	// counted is what the pump fails to give back.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	src := bytes.Repeat([]byte("0123456789abcdef"), (1<<20)/16)
	buf := make([]byte, 64<<10)
	read := func() {
		p := pump(io.NopCloser(bytes.NewReader(src)), time.Now().Add(time.Minute))
		n := 0
		for {
			m, err := p.Read(buf)
			n += m
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if n != len(src) {
			t.Fatalf("read %d bytes, want %d", n, len(src))
		}
	}
	read() // fills the pool
	const bodies = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range bodies {
		read()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / bodies; per >= 4<<10 {
		t.Fatalf("%d bytes allocated per 1 MB body read through the pump, want under 4 KiB", per)
	}
}
