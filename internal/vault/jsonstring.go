package vault

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// unquoteJSON returns what the JSON string literal raw decodes to (in dst's
// storage, when it is large enough) and reports whether raw is one the v3
// content codec accepts: quoted, with well-formed escapes and no lone
// surrogate (a lone \uD800 would decode to U+FFFD, which does not say what
// was written). It is the single decoder of contentV3: EncodeContent keeps
// Text implicit only when this returns it exactly, and ContentFields derives
// Text with it, so a record reads back as written whatever the corner cases
// are. It writes rather than compares in place: the runs between escapes
// are short, so comparing would not be cheaper.
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
	// Decoding never lengthens (every escape is at least as long as the
	// UTF-8 it stands for), so dst is sized once and written by index:
	// eight bytes at a time are copied and searched for a backslash, and
	// a one-letter escape is a table lookup. Tool output escapes a
	// newline, tab or quote every few dozen bytes; a search call and a
	// switch per escape made this pass half of encoding a record. The copy
	// loop is the same as compiler/jsonv's appendUnescaped; shared as a
	// function (even inlined) it cost a fifth to a third of the decode, so
	// each decoder keeps its own.
	if cap(dst) < len(body) {
		dst = make([]byte, len(body))
	}
	dst = dst[:len(body)]
	i, w := 0, 0 // w <= i throughout
	for {
		for i+8 <= len(body) {
			x := binary.LittleEndian.Uint64(body[i:])
			binary.LittleEndian.PutUint64(dst[w:], x)
			if m := backslashes(x); m != 0 {
				k := bits.TrailingZeros64(m) >> 3
				i, w = i+k, w+k
				goto escape
			}
			i, w = i+8, w+8
		}
		for i < len(body) && body[i] != '\\' {
			dst[w] = body[i]
			i, w = i+1, w+1
		}
		if i >= len(body) {
			return dst[:w], true
		}
	escape:
		if i+1 < len(body) {
			if c := oneLetterEscape[body[i+1]]; c != 0 {
				dst[w] = c
				i, w = i+2, w+1
				continue
			}
		}
		r, n, ok := unicodeEscape(body[i:])
		if !ok {
			return dst[:w], false
		}
		w += utf8.EncodeRune(dst[w:], r)
		i += n
	}
}

// oneLetterEscape maps the letter after a backslash to the byte it stands
// for, for the one-letter escapes (zero for any other byte).
var oneLetterEscape = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// backslashes has the high bit set in each byte of x that is a backslash,
// and possibly in bytes above one (a borrow): the lowest set bit is exact.
func backslashes(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	v := x ^ (ones * '\\')
	return (v - ones) & ^v & highs
}

// stringBody returns what stands between raw's quotes.
func stringBody(raw []byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return nil, false
	}
	return raw[1 : len(raw)-1], true
}

// unicodeEscape decodes the \u escape at the start of b (b[0] is the
// backslash), or a surrogate pair of them: the character, the bytes it
// took, and false for anything else (a malformed escape, a lone surrogate,
// another letter; the one-letter escapes are oneLetterEscape's).
func unicodeEscape(b []byte) (rune, int, bool) {
	if len(b) < 6 || b[1] != 'u' {
		return 0, 0, false
	}
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
