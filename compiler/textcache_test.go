package compiler

import (
	"strings"
	"testing"
	"unicode/utf8"
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
