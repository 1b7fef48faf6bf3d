package tokens

import (
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// checkEncode fails unless the package's encoder gives tiktoken-go's token
// ids for text.
func checkEncode(t testing.TB, enc, text string) {
	t.Helper()
	e := encodingNamed(enc)
	r, err := e.load()
	if err != nil {
		t.Fatal(err)
	}
	want := oracle(t, enc).Encode(text, nil, nil)
	got := e.encode(r, []byte(text))
	if !slices.Equal(got, want) {
		t.Fatalf("%s %.80q: ids\n%v\ntiktoken-go\n%v", enc, text, got, want)
	}
	if n, ok := e.count(r, []byte(text)); !ok || n != len(want) {
		t.Fatalf("%s %.80q: count %d %v, tiktoken-go %d", enc, text, n, ok, len(want))
	}
}

// TestRanksEqualLoader: the table holds exactly the loader's ranks.
func TestRanksEqualLoader(t *testing.T) {
	for _, enc := range encNames {
		want, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe(enc + ".tiktoken")
		if err != nil {
			t.Fatal(err)
		}
		r, err := encodingNamed(enc).load()
		if err != nil {
			t.Fatal(err)
		}
		if len(r.off)-1 != len(want) {
			t.Fatalf("%s: %d tokens, loader %d", enc, len(r.off)-1, len(want))
		}
		for tok, id := range want {
			if got, ok := r.rank([]byte(tok)); !ok || int(got) != id {
				t.Fatalf("%s %q: rank %d %v, loader %d", enc, tok, got, ok, id)
			}
			if string(r.token(id)) != tok {
				t.Fatalf("%s id %d: %q, loader %q", enc, id, r.token(id), tok)
			}
		}
		for b := range 256 { // isToken's shortcut
			if _, ok := want[string([]byte{byte(b)})]; !ok {
				t.Fatalf("%s: byte %#x is not a token", enc, b)
			}
		}
		for _, s := range []string{"", "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", "not-a-token-at-all-xyzzy"} {
			if _, in := want[s]; in {
				t.Fatalf("%s %q: pick a string that is not a token", enc, s)
			}
			if id, ok := r.rank([]byte(s)); ok {
				t.Errorf("%s %q: found as %d, the loader has no such token", enc, s, id)
			}
		}
	}
}

// TestEncodeTable: the pre-token cases and the reference texts encode to
// tiktoken-go's ids.
func TestEncodeTable(t *testing.T) {
	ref := loadReference(t)
	for _, enc := range encNames {
		for _, s := range preTokenCases {
			checkEncode(t, enc, s)
		}
		for _, r := range append(ref.Strings, ref.Bodies...) {
			checkEncode(t, enc, r.Text)
		}
	}
}

// TestEncodeCorpus: every corpus body encodes to tiktoken-go's ids.
func TestEncodeCorpus(t *testing.T) {
	if raceEnabled {
		t.Skip("tiktoken-go is too slow under the race detector for the corpus")
	}
	for name, b := range corpusBodies(t, false) {
		for _, enc := range encNames {
			e := encodingNamed(enc)
			r, _ := e.load()
			want := oracle(t, enc).Encode(string(b), nil, nil)
			if got := e.encode(r, b); !slices.Equal(got, want) {
				t.Errorf("%s %s: %d ids differ from tiktoken-go's %d", enc, name, len(got), len(want))
			}
		}
	}
}

// FuzzEncodeEqualsTiktoken: on any input the token ids (and so the counts)
// are tiktoken-go's, for both encodings.
func FuzzEncodeEqualsTiktoken(f *testing.F) {
	for _, s := range preTokenCases {
		f.Add(s)
	}
	for _, s := range fragments {
		f.Add(s + s + " " + s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 4096 {
			return
		}
		for _, enc := range encNames {
			checkEncode(t, enc, s)
		}
	})
}

// TestRanksMemory reports and bounds the heap the tables take: the point of
// not using tiktoken-go's maps.
func TestRanksMemory(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var keep []*ranks
	for _, enc := range encNames {
		r, err := loadRanks(enc)
		if err != nil {
			t.Fatal(err)
		}
		keep = append(keep, r)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	mb := float64(after.HeapAlloc-before.HeapAlloc) / (1 << 20)
	t.Logf("o200k_base and cl100k_base tables: %.1f MB of heap", mb)
	if mb > 12 {
		t.Errorf("tables take %.1f MB, want at most 12", mb)
	}
	runtime.KeepAlive(keep)
}

// BenchmarkPreTokens1MB: the scanner alone over the cold benchmark's body.
func BenchmarkPreTokens1MB(b *testing.B) {
	body := newWarmBody().with(1)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for range b.N {
		n := 0
		preTokens(body, true, func([]byte) { n++ })
	}
}

// BenchmarkCountFresh1MB: pre-tokens, rank lookups and merges of the same
// body on one goroutine, with an empty memo each time (what a cold body
// costs a worker).
func BenchmarkCountFresh1MB(b *testing.B) {
	body := newWarmBody().with(1)
	e := encodingNamed("o200k_base")
	r, err := e.load()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		m := newMemo(DefaultCacheBytes / 16)
		b.StartTimer()
		if _, ok := m.count(e, r, new(hotCounts), body); !ok {
			b.Fatal("not counted")
		}
	}
}

// BenchmarkPreTokensRegexp2_1MB: tiktoken-go's way (regexp2) on the same
// body, the yardstick for BenchmarkPreTokens1MB on a machine whose speed
// varies with its load.
func BenchmarkPreTokensRegexp2_1MB(b *testing.B) {
	body := string(newWarmBody().with(1))
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for range b.N {
		refPreTokens(b, "o200k_base", body)
	}
}

// BenchmarkCountTiktoken1MB: tiktoken-go's EncodeOrdinary on the same body,
// the yardstick for BenchmarkCountFresh1MB.
func BenchmarkCountTiktoken1MB(b *testing.B) {
	body := string(newWarmBody().with(1))
	tk := oracle(b, "o200k_base")
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for range b.N {
		tk.EncodeOrdinary(body)
	}
}

// TestPack: pack places byte i at bits 8i, for every length it takes.
func TestPack(t *testing.T) {
	b := []byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88}
	for n := 0; n <= 8; n++ {
		var want uint64
		for i := range n {
			want |= uint64(b[i]) << (8 * i)
		}
		if got := pack(b[:n]); got != want {
			t.Errorf("pack of %d bytes: %#x, want %#x", n, got, want)
		}
	}
}

// BenchmarkTablesRSS reports what building the tables of both encodings
// adds to the process's resident memory (VmRSS, after a GC), ours first,
// then tiktoken-go's for comparison. Run it alone, in a fresh process:
//
//	go test ./tokens -run '^$' -bench TablesRSS -benchtime 1x
func BenchmarkTablesRSS(b *testing.B) {
	for _, e := range encodings {
		if e.ranks != nil {
			b.Skip("tables already built in this process")
		}
	}
	rss := func() float64 {
		runtime.GC()
		debug.FreeOSMemory()
		return float64(procStatusKB(b, "VmRSS")) / 1024
	}
	base := rss()
	if _, err := New(Config{}); err != nil {
		b.Fatal(err)
	}
	own := rss()
	for _, enc := range encNames {
		oracle(b, enc)
	}
	theirs := rss()
	b.ReportMetric(own-base, "tables-rss-MB")
	b.ReportMetric(theirs-own, "tiktoken-go-rss-MB")
	b.ReportMetric(float64(procStatusKB(b, "VmHWM"))/1024, "peak-rss-MB")
}

// procStatusKB reads a "kB" field of /proc/self/status.
func procStatusKB(b *testing.B, field string) int {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skip(err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	b.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// TestCountInvalidUTF8: the scanner sees invalid UTF-8 as it goes (no
// pass of its own over valid text), and such a piece is counted as
// tiktoken-go reads it, wherever the bad bytes are: inside a word, after
// ASCII the fast path stopped at, in a contraction, at the end, next to a
// real U+FFFD.
func TestCountInvalidUTF8(t *testing.T) {
	for _, enc := range encNames {
		e := encodingNamed(enc)
		r, err := e.load()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{
			"a\xffb", "x \xe6\x97 y", "word\xc3(", "'\xed\xa0\x80s", "12\x80", "\xef\xbf\xbd \xff",
			"héllo\xfe wörld", "   \xc0\x80\n", "it'\xc5S", "ok\x80", "\x80ok",
		} {
			for _, hot := range []*hotCounts{nil, r.hot.get()} {
				n, ok := newMemo(1<<20).count(e, r, hot, []byte(s))
				if want := direct(t, enc, s); !ok || n != want {
					t.Errorf("%s: %q counted %d (%v), tiktoken-go %d", enc, s, n, ok, want)
				}
			}
		}
		for _, s := range []string{"plain ascii text", "héllo wörld 日本"} {
			sc := scanner{s: []byte(s)}
			for i := 0; i < len(s); i = sc.next(i, e.o200k) {
			}
			if sc.invalid {
				t.Errorf("%s: valid %q seen as invalid", enc, s)
			}
		}
	}
}
