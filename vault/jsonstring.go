package vault

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// unquoteJSON appends to dst what the JSON string literal raw decodes to and
// reports whether raw is one the v3 content codec accepts: quoted, with
// well-formed escapes and no lone surrogate (a lone \uD800 would decode to
// U+FFFD, which does not say what was written). It is the single decoder for
// both directions of contentV3: encodeContent keeps Text implicit only when
// this returns it exactly, and contentFields derives Text with it, so a
// record reads back as written whatever the decoder's corner cases are.
//
// It does not validate what a JSON parser would (unescaped control
// characters, UTF-8): that is not needed for the round trip, and skipping it
// keeps the check on every written artifact a memmove-speed pass. It is not
// compiler/jsonv's decoder because that one trusts its input to be a
// validated string, while stored bytes are not (they may be damaged).
func unquoteJSON(dst, raw []byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return dst, false
	}
	body := raw[1 : len(raw)-1]
	dst = dst[:0:cap(dst)]
	if cap(dst) < len(body) {
		dst = make([]byte, 0, len(body))
	}
	for i := 0; i < len(body); {
		j := bytes.IndexByte(body[i:], '\\')
		if j < 0 {
			return append(dst, body[i:]...), true
		}
		dst = append(dst, body[i:i+j]...)
		i += j
		if i+1 >= len(body) {
			return dst, false
		}
		switch c := body[i+1]; c {
		case '"', '\\', '/':
			dst = append(dst, c)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hexRune(body[i+2:])
			if !ok {
				return dst, false
			}
			i += 6
			if utf16.IsSurrogate(r) {
				if i+1 >= len(body) || body[i] != '\\' || body[i+1] != 'u' {
					return dst, false
				}
				r2, ok := hexRune(body[i+2:])
				if r = utf16.DecodeRune(r, r2); !ok || r == utf8.RuneError {
					return dst, false
				}
				i += 6
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default:
			return dst, false
		}
		i += 2
	}
	return dst, true
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
