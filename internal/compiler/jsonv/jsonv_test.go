package jsonv

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in string
		ok bool
	}{
		{`{}`, true},
		{` {"a" : [1, -0.5e+3, true, false, null, "x\u00e9\n"]} `, true},
		{`"\ud83d\ude00"`, true},
		{`[`, false},
		{`{"a":1,}`, false},
		{`{"a":1,"a":2}`, false},
		{`[01]`, false},
		{`[1.]`, false},
		{`"\x"`, false},
		{"\"a\x01\"", false},
		{"\"\xff\"", false},
		{`{} x`, false},
		{`tru`, false},
		{strings.Repeat("[", 600) + strings.Repeat("]", 600), false},
		{strings.Repeat("[", 500) + strings.Repeat("]", 500), true},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.in), 0)
		if (err == nil) != tt.ok {
			t.Errorf("Parse(%.40q) err=%v, want ok=%v", tt.in, err, tt.ok)
		}
	}
}

func TestSpansAndText(t *testing.T) {
	src := []byte(`{"k":"v\"\u00e9\ud83d\ude00\ud800","n": 1.5 ,"a":[ {"x":null} ]}`)
	n, err := Parse(src, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(n.Get("n").Raw(src)); got != "1.5" {
		t.Errorf("number span %q", got)
	}
	if got := string(n.Get("a").Elems[0].Raw(src)); got != `{"x":null}` {
		t.Errorf("object span %q", got)
	}
	s, _ := n.Get("k").Text(src)
	var want string
	_ = json.Unmarshal([]byte(`"v\"\u00e9\ud83d\ude00\ud800"`), &want)
	if s != want {
		t.Errorf("Text = %q, want %q", s, want)
	}
}

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\s", "ctl\x00\x1f\n\t\r", "<&>", "é日本✓", "\u2028\u2029", "bad\xffutf8"} {
		enc := AppendString(nil, s)
		var got string
		if err := json.Unmarshal(enc, &got); err != nil {
			t.Fatalf("AppendString(%q) = %s: %v", s, enc, err)
		}
		want := strings.ToValidUTF8(s, "\uFFFD")
		if got != want {
			t.Errorf("round trip %q -> %q", s, got)
		}
	}
}

// FuzzParse checks the parser against encoding/json: whatever it accepts is
// valid JSON, and every string it decodes decodes the same way there.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"a":[1,"b",null]}`, `"\u00e9"`, `[1e5,-0,true]`, `{"a":{"b":"\n"}}`,
		`"abcdefgh\ud800ijklmnop\udc00qrstuvwx\ud83d\ude00yz\ud83d\u0041\ud83d"`, `"12345678\"\\\/\b\f\n\r\t12345678"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		n, err := Parse(src, 64)
		if err != nil {
			return
		}
		if !json.Valid(src) || !utf8.Valid(src) {
			t.Fatalf("accepted invalid JSON %q", src)
		}
		var walk func(*Node)
		walk = func(n *Node) {
			switch n.Kind {
			case String:
				var want string
				if err := json.Unmarshal(n.Raw(src), &want); err != nil {
					t.Fatalf("span %q: %v", n.Raw(src), err)
				}
				if got, _ := n.Text(src); got != want {
					t.Fatalf("Text %q, want %q", got, want)
				}
				checkRawOffsets(t, n.Raw(src), want)
			case Object:
				for _, m := range n.Members {
					walk(m.Value)
				}
			case Array:
				for _, e := range n.Elems {
					walk(e)
				}
			default:
				if !json.Valid(n.Raw(src)) {
					t.Fatalf("bad span %q", n.Raw(src))
				}
			}
		}
		walk(n)
	})
}

func TestTextPrefix(t *testing.T) {
	full := `"ab\n\u00e9\ud83d\ude00` + strings.Repeat(`x\"`, 50) + `"`
	n, err := Parse([]byte(full), 0)
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := n.Text([]byte(full))
	for max := 0; max < len(full)+4; max++ {
		got := n.TextPrefix([]byte(full), max)
		// A cut between the halves of a surrogate pair decodes the first
		// half as U+FFFD; otherwise the result is a prefix of the text.
		if !strings.HasPrefix(whole, strings.TrimSuffix(got, "\uFFFD")) {
			t.Fatalf("TextPrefix(%d) = %q is not a prefix", max, got)
		}
		if len(got) > max+8 && got != whole {
			t.Fatalf("TextPrefix(%d) returned %d bytes", max, len(got))
		}
	}
}

// checkRawOffsets: at every decoded byte offset, RawOffset either finds the
// raw offset whose prefix decodes to exactly that much, or says the offset
// falls inside one escape (or surrogate pair); at rune starts of an
// unescaped rune it always finds it.
func checkRawOffsets(t *testing.T, q []byte, decoded string) {
	t.Helper()
	for want := 0; want <= len(decoded); want++ {
		off, ok := RawOffset(q, want)
		if !ok {
			continue
		}
		if got := string(AppendUnquoted(nil, q[1:off])); got != decoded[:want] {
			t.Fatalf("RawOffset(%q, %d) = %d: prefix decodes to %q", q, want, off, got)
		}
		if got := string(AppendUnquoted(nil, q[off:len(q)-1])); got != decoded[want:] {
			t.Fatalf("RawOffset(%q, %d) = %d: rest decodes to %q", q, want, off, got)
		}
	}
	if off, ok := RawOffset(q, len(decoded)); !ok || off != len(q)-1 {
		t.Fatalf("RawOffset(%q, end) = %d, %v", q, off, ok)
	}
	if _, ok := RawOffset(q, len(decoded)+1); ok {
		t.Fatalf("RawOffset past the end found")
	}
}

func TestRawOffset(t *testing.T) {
	for _, raw := range []string{`""`, `"abc"`, `"a\nb"`, `"\u00e9x"`, `"é\"q\""`, `"\ud83d\ude00!"`, `"\ud83dx"`, `"\u003csystem-reminder\u003e\n"`} {
		var want string
		if err := json.Unmarshal([]byte(raw), &want); err != nil {
			t.Fatal(err)
		}
		checkRawOffsets(t, []byte(raw), want)
	}
	// Inside an escape there is no raw offset.
	if _, ok := RawOffset([]byte(`"\u00e9"`), 1); ok {
		t.Fatal("offset inside an escaped rune")
	}
}

// BenchmarkParse1MB parses the ~1 MB chat request of the compiler's and the
// gateway's 1 MB benchmarks: 51 tool results of ~20 KB of code-like text
// with escapes and some non-ASCII.
func BenchmarkParse1MB(b *testing.B) {
	src := fixtures.ChatBody("gpt-4o", fixtures.Turns(1000, 51, 20000), "")
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(src, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// TestStringStops puts each byte the string scanner must stop at (quote,
// escape, control character, valid and invalid UTF-8) at every offset of
// the eight-byte blocks it skips, and checks acceptance and the decoded
// text against encoding/json.
func TestStringStops(t *testing.T) {
	pieces := []string{`\"`, `\\`, `\n`, `\u00e9`, `\ud83d\ude00`, "é", "日本", "✓", "\U0001F600", "\x01", "\x1f", "\xff", "\xc3", "\xed\xa0\x80", "\xe6\x97", "\"", "\\"}
	for _, piece := range pieces {
		for pad := 0; pad < 18; pad++ {
			for tail := 0; tail < 10; tail += 3 {
				raw := `"` + strings.Repeat("a", pad) + piece + strings.Repeat("b", tail) + `"`
				src := []byte(`{"k":` + raw + `}`)
				n, err := Parse(src, 0)
				var want map[string]string
				valid := json.Valid(src) && utf8.Valid(src) && json.Unmarshal(src, &want) == nil
				if (err == nil) != valid {
					t.Fatalf("Parse(%q): err=%v, want valid=%v", src, err, valid)
				}
				if err != nil {
					continue
				}
				v := n.Get("k")
				if got, _ := v.Text(src); got != want["k"] {
					t.Fatalf("Parse(%q): text %q, want %q", src, got, want["k"])
				}
				if v.End != len(src)-1 || v.Start != 5 {
					t.Fatalf("Parse(%q): span [%d,%d)", src, v.Start, v.End)
				}
				if v.ASCII != (strings.IndexFunc(raw, func(r rune) bool { return r >= utf8.RuneSelf }) < 0) {
					t.Fatalf("Parse(%q): ASCII=%v", src, v.ASCII)
				}
				if v.Escaped != strings.Contains(raw, `\`) {
					t.Fatalf("Parse(%q): Escaped=%v", src, v.Escaped)
				}
			}
		}
	}
}

// TestRuneLen checks the scanner's inline UTF-8 check against
// unicode/utf8 on every one-, two- and three-byte prefix and on four-byte
// sequences around the edges.
func TestRuneLen(t *testing.T) {
	check := func(b []byte) {
		want := 0
		if r, size := utf8.DecodeRune(b); r != utf8.RuneError || size != 1 {
			want = size
		}
		if got := runeLen(b); got != want {
			t.Fatalf("runeLen(% x) = %d, want %d", b, got, want)
		}
	}
	for c0 := 0x80; c0 < 0x100; c0++ {
		check([]byte{byte(c0)})
		for c1 := 0; c1 < 0x100; c1++ {
			check([]byte{byte(c0), byte(c1)})
			for _, c2 := range []byte{0x00, 0x7f, 0x80, 0xbf, 0xc0, 0xff} {
				check([]byte{byte(c0), byte(c1), c2})
				check([]byte{byte(c0), byte(c1), c2, 0x80})
				check([]byte{byte(c0), byte(c1), c2, 0xbf, 'x'})
			}
		}
	}
}

// spellings returns s as JSON strings the way real encoders write it: Go's
// encoding/json (HTML-escaped), JavaScript (raw UTF-8, only the required
// escapes), Python with ensure_ascii (every non-ASCII rune as \u, pairs
// for astral ones) and one with every character escaped.
func spellings(s string) [][]byte {
	goSpelling, _ := json.Marshal(s)
	js, ascii, all := []byte{'"'}, []byte{'"'}, []byte{'"'}
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r == '"' || r == '\\':
			js, ascii = append(js, '\\', byte(r)), append(ascii, '\\', byte(r))
		case r < 0x20:
			js, ascii = fmt.Appendf(js, `\u%04x`, r), fmt.Appendf(ascii, `\u%04x`, r)
		case r < 0x80:
			js, ascii = append(js, byte(r)), append(ascii, byte(r))
		default:
			js = utf8.AppendRune(js, r)
			if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
				ascii = fmt.Appendf(ascii, `\u%04x\u%04X`, r1, r2)
			} else {
				ascii = fmt.Appendf(ascii, `\u%04x`, r)
			}
		}
		if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			all = fmt.Appendf(all, `\u%04X\u%04x`, r1, r2)
		} else {
			all = fmt.Appendf(all, `\u%04x`, r)
		}
	}
	return [][]byte{goSpelling, append(js, '"'), append(ascii, '"'), append(all, '"')}
}

// FuzzStringDecode: every spelling of a string, whatever its length and
// escape density, decodes to what encoding/json decodes, through Text,
// AppendText and AppendUnquoted (onto a non-empty buffer).
func FuzzStringDecode(f *testing.F) {
	for _, s := range []string{"", "plain text longer than eight bytes", "a\tb\n\"q\"\\ tab\tend", "héllo 日本 ✓ 😀 <a&b>", fixtures.ToolOutput(3, 300), "\x00\x1f\x7f", "bad \xff utf8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, q := range spellings(s) {
			var want string
			if err := json.Unmarshal(q, &want); err != nil {
				t.Fatalf("spelling %q: %v", q, err)
			}
			n, err := Parse(q, 1)
			if err != nil {
				t.Fatalf("Parse(%q): %v", q, err)
			}
			if got, _ := n.Text(q); got != want {
				t.Fatalf("Text(%q) = %q, want %q", q, got, want)
			}
			if got := n.AppendText([]byte("pre"), q); string(got) != "pre"+want {
				t.Fatalf("AppendText(%q) = %q, want pre%q", q, got, want)
			}
			if got := AppendUnquoted([]byte("pre"), q[1:len(q)-1]); string(got) != "pre"+want {
				t.Fatalf("AppendUnquoted(%q) = %q, want pre%q", q, got, want)
			}
		}
	})
}

// BenchmarkText decodes a 20 KB tool result as Go's encoding/json spells
// it (a tab, two quotes and a newline escaped on every line).
func BenchmarkText(b *testing.B) {
	q, _ := json.Marshal(fixtures.ToolOutput(7, 20000))
	n, err := Parse(q, 1)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(q)))
	b.ReportAllocs()
	for b.Loop() {
		n.Text(q)
	}
}

// TestAppendUnquotedPartialEscape: a span that ends inside an escape (which
// RawOffset never cuts, but a caller might) is copied as it stands past
// its last whole escape, never read beyond.
func TestAppendUnquotedPartialEscape(t *testing.T) {
	for _, tt := range []struct{ body, want string }{
		{`abc\`, `abc\`},
		{`a\nb\`, "a\nb\\"},
		{`x\u12`, `x\u12`},
		{`12345678\u00`, `12345678\u00`},
		{`\u00e9\u`, "\u00e9\\u"},
	} {
		body := []byte(tt.body)
		if got := string(AppendUnquoted(nil, body[:len(body):len(body)])); got != tt.want {
			t.Errorf("AppendUnquoted(%q) = %q, want %q", tt.body, got, tt.want)
		}
	}
}
