package tokens

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
)

// The regexes as tiktoken-go v0.1.8 compiles them (encoding.go); the
// reference the scanner must equal. TestPreTokensMatchTiktoken ties them to
// tiktoken-go's own output, so a stale copy here fails.
var refPatterns = map[string]*regexp2.Regexp{
	"o200k_base": regexp2.MustCompile(strings.Join([]string{
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`\p{N}{1,3}`,
		` ?[^\s\p{L}\p{N}]+[\r\n/]*`,
		`\s*[\r\n]+`,
		`\s+(?!\S)`,
		`\s+`,
	}, "|"), regexp2.None),
	"cl100k_base": regexp2.MustCompile(`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`, regexp2.None),
}

// refPreTokens is what tiktoken-go does: regexp2 over the runes of text,
// each match converted back to a string.
func refPreTokens(t testing.TB, enc, text string) []string {
	t.Helper()
	runes := []rune(text)
	var out []string
	m, err := refPatterns[enc].FindStringMatch(text)
	for ; m != nil && err == nil; m, err = refPatterns[enc].FindNextMatch(m) {
		out = append(out, string(runes[m.Index:m.Index+m.Length]))
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func scanPreTokens(enc, text string) []string {
	var out []string
	preTokens([]byte(text), enc == "o200k_base", func(p []byte) { out = append(out, string(p)) })
	return out
}

// checkPreTokens fails unless the scanner cuts text exactly as regexp2.
func checkPreTokens(t testing.TB, enc, text string) {
	t.Helper()
	want := refPreTokens(t, enc, text)
	got := scanPreTokens(enc, text)
	if slices.Equal(got, want) {
		return
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Fatalf("%s %q: pre-token %d is %q, regexp2 %q\n got %q\nwant %q", enc, text, i, got[i], want[i], got, want)
		}
	}
	t.Fatalf("%s %q:\n got %q\nwant %q", enc, text, got, want)
}

// preTokenCases exercise each alternative and its backtracking.
var preTokenCases = []string{
	"", "a", "hello world", "Hello World", "HELLO", "HeLLo wORLD", "don't", "DON'T", "I'm", "we'LL",
	"you'Re", "they've", "'s", "'S", "'", "''s", "'ll", "'x", "x'", "it's'", "'re'", "a'b",
	"  hello", "\thello", "\n hello", "hello  ", "hello \n", "  \n  x", "\r\n\r\n", " \r\n ", "a\n\n\nb",
	"\n\n  \n  ", "   ", " ", "\n", "x ", "x  ", "x   y", "\u00a0x", "\u3000\u3000x", "\u0085\u0085",
	"12345678", "1 23 456", "½¾", "١٢٣٤", "x123", "123abc", "{\"a\":1}", " {", " {\n", " }\n\n", "//\n/",
	"a/\nb", " /\n/", "!!!", " !!!\n\n", "e\u0301", "\u0301", "\u0301\u0301a", "a\u0301'S", "\u0301's",
	" \u0301", "ǅungla", "ǅǅ", "Straße", "ĲSSEL", "ΑΒΓδεζ", "日本語のテキスト", "中文 English", "😀😀",
	"👍🏽 ok", "x😀y", "\x00\x01", "\xff\xfe", "a\xffb", "\xe2\x82", "İstanbul'S", "K'S", "x'\u212A",
	"'\u0130", "ſ's", "'ſ", "𝐀𝐁𝐜𝐝", "𝟙𝟚𝟛𝟜", "\U00010400\U00010428", "<|endoftext|>", "\\n\\t\\\"",
	"\"\n\"", ",\n", "\t\t\tx", "\v\fx", "\u2028x\u2029", "\u200bx", "a\u00adb", "ﬁne", "ⅷ ⅸ",
}

func TestPreTokensTable(t *testing.T) {
	for _, enc := range encNames {
		for _, s := range preTokenCases {
			checkPreTokens(t, enc, s)
		}
	}
}

// TestPreTokensFragments: long mixes of the fragments the other tests use.
func TestPreTokensFragments(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	for range 200 {
		s := genText(r, 400)
		for _, enc := range encNames {
			checkPreTokens(t, enc, s)
		}
	}
}

// TestPreTokensCorpus: every corpus body cuts the same (skips when the
// corpus is absent).
func TestPreTokensCorpus(t *testing.T) {
	if raceEnabled {
		t.Skip("regexp2 is too slow under the race detector for the corpus")
	}
	for name, b := range corpusBodies(t, false) {
		for _, enc := range encNames {
			want := refPreTokens(t, enc, string(b))
			got := scanPreTokens(enc, string(b))
			if !slices.Equal(got, want) {
				t.Errorf("%s %s: %d pre-tokens, regexp2 %d", enc, name, len(got), len(want))
			}
		}
	}
}

// FuzzPreTokensEqualRegexp: on any input the scanner's pre-tokens are
// regexp2's, piece for piece, for both encodings.
func FuzzPreTokensEqualRegexp(f *testing.F) {
	for _, s := range preTokenCases {
		f.Add(s)
	}
	for _, s := range fragments {
		f.Add(s + " " + s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 4096 {
			return
		}
		for _, enc := range encNames {
			checkPreTokens(t, enc, s)
		}
	})
}
