package compiler

import (
	"crypto/sha256"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"
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
		direct := newText(s.str())
		if s.digest != direct.digest || s.chars != direct.chars {
			t.Fatalf("pass %d: cached text differs from decoding", pass)
		}
	}
	// One entry for the string, one for its tool-result body split.
	if len(c.cur) != 2 {
		t.Fatalf("cache holds %d entries", len(c.cur))
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
				if got.digest != sha256.Sum256(b) || got.chars != utf8.RuneCount(b) || got.s != raw {
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
