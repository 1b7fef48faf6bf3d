package vault

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// unquoteJSON returns what the JSON string literal raw decodes to (in dst's
// storage, when it is large enough) and reports whether raw is one the v3
// content codec accepts: quoted, with well-formed escapes and no lone
// surrogate (a lone \uD800 would decode to U+FFFD, which does not say what
// was written). It is the single decoder of contentV3: encodeContent keeps
// Text implicit only when this returns it exactly, and contentFields derives
// Text with it, so a record reads back as written whatever the corner cases
// are. (A variant comparing in place, without writing, measured no faster:
// the runs between escapes are short.)
//
// It does not validate what a JSON parser would (unescaped control
// characters, UTF-8): that is not needed for the round trip, and skipping it
// keeps the check on every written artifact a single pass. It is not
// compiler/jsonv's decoder because that one trusts its input to be a
// validated string, while stored bytes are not (they may be damaged).
func unquoteJSON(dst, raw []byte) ([]byte, bool) {
	body, ok := stringBody(raw)
	if !ok {
		return dst, false
	}
	if cap(dst) < len(body) {
		dst = make([]byte, 0, len(body))
	}
	dst = dst[:0]
	for i := 0; i < len(body); {
		j := bytes.IndexByte(body[i:], '\\')
		if j < 0 {
			return append(dst, body[i:]...), true
		}
		dst = append(dst, body[i:i+j]...)
		r, n, ok := escape(body[i+j:])
		if !ok {
			return dst, false
		}
		dst = utf8.AppendRune(dst, r)
		i += j + n
	}
	return dst, true
}

// stringBody returns what stands between raw's quotes.
func stringBody(raw []byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return nil, false
	}
	return raw[1 : len(raw)-1], true
}

// escape decodes the escape at the start of b (b[0] is the backslash): the
// character, the bytes it took, and false for a malformed escape or a lone
// surrogate.
func escape(b []byte) (rune, int, bool) {
	if len(b) < 2 {
		return 0, 0, false
	}
	switch c := b[1]; c {
	case '"', '\\', '/':
		return rune(c), 2, true
	case 'b':
		return '\b', 2, true
	case 'f':
		return '\f', 2, true
	case 'n':
		return '\n', 2, true
	case 'r':
		return '\r', 2, true
	case 't':
		return '\t', 2, true
	case 'u':
		r, ok := hexRune(b[2:])
		if !ok {
			return 0, 0, false
		}
		if !utf16.IsSurrogate(r) {
			return r, 6, true
		}
		if len(b) < 8 || b[6] != '\\' || b[7] != 'u' {
			return 0, 0, false
		}
		r2, ok := hexRune(b[8:])
		if r = utf16.DecodeRune(r, r2); !ok || r == utf8.RuneError {
			return 0, 0, false
		}
		return r, 12, true
	}
	return 0, 0, false
}

// hexRune reads the four hex digits at the start of b.
func hexRune(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		var v byte
		switch {
		case '0' <= c && c <= '9':
			v = c - '0'
		case 'a' <= c && c <= 'f':
			v = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}
