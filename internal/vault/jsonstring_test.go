package vault

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
)

// TestUnquoteJSON: the spellings real clients use (Go, JavaScript, Python
// with ensure_ascii) decode to their text; anything the v3 codec cannot
// round-trip is refused.
func TestUnquoteJSON(t *testing.T) {
	tests := []struct {
		raw  string
		want string
		ok   bool
	}{
		{`""`, "", true},
		{`"plain"`, "plain", true},
		{`"a\nb\tc\r\"q\"\\ \/ \b\f"`, "a\nb\tc\r\"q\"\\ / \b\f", true},
		{`"\u003chtml\u003e \u0026"`, "<html> &", true},                // Go's encoding/json
		{`"h\u00e9llo \u65e5\u672c \ud83d\ude00"`, "héllo 日本 😀", true}, // Python ensure_ascii
		{`"h\u00E9llo \uD83D\uDE00"`, "héllo 😀", true},                 // upper-case hex
		{`"héllo 日本 😀"`, "héllo 日本 😀", true},                           // JavaScript, raw UTF-8
		{`"\ufffd"`, "\ufffd", true},
		{`"lone \ud800 high"`, "", false},
		{`"lone \udc00 low"`, "", false},
		{`"pair? \ud83d\u0041"`, "", false},
		{`"cut \ud83d"`, "", false},
		{`"bad \x escape"`, "", false},
		{`"short \u12"`, "", false},
		{`"bad hex \u12g4"`, "", false},
		{`"trailing \"`, "", false},
		{`"unterminated`, "", false},
		{`noquotes`, "", false},
		{`"`, "", false},
		{`["array"]`, "", false},
		{`{"k":"v"}`, "", false},
		{``, "", false},
	}
	for _, tt := range tests {
		got, ok := unquoteJSON(nil, []byte(tt.raw))
		if ok != tt.ok || (ok && string(got) != tt.want) {
			t.Errorf("unquoteJSON(%s) = %q, %v; want %q, %v", tt.raw, got, ok, tt.want, tt.ok)
		}
	}
}

// TestContentV3: an artifact whose Raw is a JSON string of its Text is
// stored without the Text (v3) and reads back whole; any other artifact is
// stored whole (v2). Both pass the integrity check for their digest.
func TestContentV3(t *testing.T) {
	tests := []struct {
		name string
		text string
		raw  string
		want byte
	}{
		{"go encoding/json", "héllo <b>\n\t\"x\"", mustJSON("héllo <b>\n\t\"x\""), contentV3},
		{"python ensure_ascii", "héllo 😀 <tag> \n", `"h\u00e9llo \ud83d\ude00 <tag> \n"`, contentV3},
		{"javascript", "héllo 😀 <tag> \n", `"héllo 😀 <tag> \n"`, contentV3},
		{"empty", "", `""`, contentV3},
		{"raw is an array", "part one", `[{"type":"text","text":"part one"}]`, contentV2},
		{"raw decodes to other text", "summary", `"something else"`, contentV2},
		{"lone surrogate", "\ufffd", `"\ud800"`, contentV2},
		{"raw not json", "x", `x`, contentV2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := artifact.Artifact{Text: tt.text, Raw: []byte(tt.raw), Tool: "bash", Args: `{"cmd":"ls"}`}
			a.Digest = artifact.DigestOf(a.Text, a.Raw)
			b := EncodeContent(&a)
			if b[0] != tt.want {
				t.Fatalf("stored as version %#x, want %#x", b[0], tt.want)
			}
			var got artifact.Artifact
			if err := DecodeContent(b, &got); err != nil || got.Text != a.Text || !bytes.Equal(got.Raw, a.Raw) || got.Tool != a.Tool || got.Args != a.Args {
				t.Fatalf("round trip = %+v, %v", got, err)
			}
			if !SameContent(b, &a) {
				t.Fatal("sameContent is false for its own encoding")
			}
			if err := CheckSealedContent(b, "t", a.Digest, nil); err != nil {
				t.Fatalf("checkContent: %v", err)
			}
		})
	}
}

func mustJSON(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestContentV3Smaller: storing Raw alone costs little more than one copy;
// v2 stored both near copies (the reason for v3).
func TestContentV3Smaller(t *testing.T) {
	a := mkArt(strings.Repeat("    12\tdef value(self): return \"q\" # héllo\n", 500))
	v3 := EncodeContent(&a)
	v2 := EncodeContent(&artifact.Artifact{Text: a.Text, Raw: append([]byte(" "), a.Raw...), Tool: a.Tool, Args: a.Args})
	if v3[0] != contentV3 || v2[0] != contentV2 {
		t.Fatalf("versions %#x, %#x", v3[0], v2[0])
	}
	if len(v3) >= len(v2) {
		t.Fatalf("v3 stored %d bytes, v2 %d", len(v3), len(v2))
	}
}

// FuzzUnquoteJSON: on any input unquoteJSON neither panics nor disagrees
// with the compiler's decoder: a string jsonv accepts
// decodes to the same text, or is refused only for a lone surrogate.
func FuzzUnquoteJSON(f *testing.F) {
	for _, s := range []string{`"a\nb"`, `"\ud83d\ude00"`, `"\ud800"`, `"x\"`, `"\u00e9\/"`, `"日本"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := unquoteJSON(nil, raw)
		n, err := jsonv.Parse(raw, 1)
		if err != nil || n.Kind != jsonv.String || n.Start != 0 || n.End != len(raw) {
			return
		}
		want := jsonv.AppendUnquoted(nil, raw[1:len(raw)-1])
		if ok && !bytes.Equal(got, want) {
			t.Fatalf("unquoteJSON(%q) = %q, jsonv %q", raw, got, want)
		}
		if !ok && !bytes.Contains(want, []byte(string(utf8.RuneError))) {
			t.Fatalf("unquoteJSON refused %q (jsonv: %q)", raw, want)
		}
	})
}

// FuzzContentRoundTrip: whatever an artifact's Text and Raw are, its stored
// form reads back as exactly that artifact.
func FuzzContentRoundTrip(f *testing.F) {
	f.Add("text", []byte(`"text"`))
	f.Add("a\nb", []byte(`"a\nb"`))
	f.Add("\ufffd", []byte(`"\ud800"`))
	f.Add("x", []byte(`["x"]`))
	f.Fuzz(func(t *testing.T, text string, raw []byte) {
		a := artifact.Artifact{Text: text, Raw: raw, Tool: "t", Args: "{}"}
		var got artifact.Artifact
		if err := DecodeContent(EncodeContent(&a), &got); err != nil || got.Text != a.Text || !bytes.Equal(got.Raw, a.Raw) || got.Tool != a.Tool || got.Args != a.Args {
			t.Fatalf("round trip of %q / %q = %+v, %v", text, raw, got, err)
		}
	})
}

// mkArt is a tool result artifact of text, as the Badger store's tests
// make one.
func mkArt(text string) artifact.Artifact {
	raw, _ := json.Marshal(text)
	return artifact.Artifact{
		Digest: artifact.DigestOf(text, raw),
		Text:   text,
		Raw:    raw,
		Tool:   "read_file",
		Args:   `{"path":"/etc/hosts"}`,
		Chars:  utf8.RuneCountInString(text),
	}
}
