package compiler

import (
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

func TestRuneCount(t *testing.T) {
	for _, s := range []string{"", "a", "héllo wörld", "日本語のテキスト", "emoji 😀👍 mixed ascii and ✓", "\u2028\u2029x", string(make([]byte, 100))} {
		for i := 0; i <= len(s); i++ {
			if !utf8.ValidString(s[i:]) {
				continue
			}
			if got, want := runeCount([]byte(s[i:])), utf8.RuneCountInString(s[i:]); got != want {
				t.Errorf("runeCount(%q) = %d, want %d", s[i:], got, want)
			}
		}
	}
}

// The cache must give exactly what decoding gives, and a different raw
// spelling of the same text must reach the same digest.
func TestTextCache(t *testing.T) {
	c := newTextCache()
	long := `"` + strings.Repeat(`line \"q\" é \u00e9\n`, 200) + `"`
	for pass := 0; pass < 2; pass++ {
		d, reason := parseDoc(chatFormat{}, []byte(`{"messages":[{"role":"tool","tool_call_id":"x","content":`+long+`}]}`), c)
		if reason != "" {
			t.Fatal(reason)
		}
		s := d.slots[0].text
		direct := newText(s.str(), d.src[d.slots[0].start:d.slots[0].end])
		if s.digest != direct.digest || s.chars != direct.chars {
			t.Fatalf("pass %d: cached text differs from decoding", pass)
		}
	}
	// One entry for the string, one for its tool-result body split.
	if n := c.texts.len(); n != 2 {
		t.Fatalf("cache holds %d entries", n)
	}
}

// rawText (a folded turn's identity) gives the digest and size of the raw
// bytes themselves, from the cache the second time, and its string is the
// raw bytes without a copy.
func TestRawText(t *testing.T) {
	c := newTextCache()
	for _, raw := range []string{
		`{"role":"user","content":"short"}`,
		`{"role":"user","content":"` + strings.Repeat("é turn text ", 300) + `"}`,
	} {
		b := []byte(raw)
		for pass := range 2 {
			for _, cache := range []*textCache{c, nil} {
				got := cache.rawText(b)
				if got.digest != artifact.DigestOf(raw, b) || got.chars != utf8.RuneCount(b) || got.s != raw {
					t.Fatalf("pass %d: rawText(%.20q) = chars %d, text %.20q", pass, raw, got.chars, got.s)
				}
				if unsafe.StringData(got.s) != &b[0] {
					t.Fatalf("pass %d: the text is a copy", pass)
				}
			}
		}
		_, cached := c.get(c.key(b))
		if cached != (len(b) >= longString) {
			t.Fatalf("%d bytes: cached %v", len(b), cached)
		}
	}
}

// knownStrings (the parse's memory of long strings): a resent string is
// skipped only within its tenant and only when its whole bytes match; the
// document, its digests and the hasher's cache keys are those of a parse
// without it.
func TestKnownStrings(t *testing.T) {
	long := strings.Repeat(`line \"q\" é \u00e9\n`, 200)
	body := func(results ...string) []byte {
		var b strings.Builder
		b.WriteString(`{"messages":[`)
		for i, r := range results {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"role":"tool","tool_call_id":"x","content":"` + r + `"}`)
		}
		b.WriteString(`]}`)
		return []byte(b.String())
	}
	c := newTextCache()
	tests := []struct {
		name, tenant string
		body         []byte
		skipped      int // strings whose scan was skipped
	}{
		{"first", "A", body(long), 0},
		{"resent, one new", "A", body(long, long+"x"), 1},
		{"other tenant", "B", body(long, long+"x"), 0},
		{"resent twice", "A", body(long+"x", long), 2},
		{"same start, changed end", "A", body(long+"y", long[:len(long)-2]+"zz"), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := newKnownStrings(c, tc.tenant)
			got, reason := parseDocKnown(chatFormat{}, tc.body, c, k)
			if reason != "" {
				t.Fatal(reason)
			}
			want, _ := parseDoc(chatFormat{}, tc.body, newTextCache())
			if len(got.slots) != len(want.slots) {
				t.Fatalf("%d slots, want %d", len(got.slots), len(want.slots))
			}
			for i := range got.slots {
				g, w := got.slots[i], want.slots[i]
				if g.text.digest != w.text.digest || g.text.chars != w.text.chars || g.start != w.start || g.end != w.end {
					t.Fatalf("slot %d differs from a parse without known strings", i)
				}
			}
			for _, s := range got.slots {
				if key, ok := k.keyAt(s.start); !ok || key != c.key(tc.body[s.start:s.end]) {
					t.Fatalf("slot at %d: no kept key, or not the cache key of its bytes", s.start)
				}
			}
			if k.skipped != tc.skipped {
				t.Fatalf("%d strings skipped, want %d", k.skipped, tc.skipped)
			}
		})
	}
}
