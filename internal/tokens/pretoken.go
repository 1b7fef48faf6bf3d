package tokens

import (
	"unicode"
	"unicode/utf8"
)

// A hand-written scanner for the two pre-tokenizer regexes (split.go quotes
// them), equal to tiktoken-go's regexp2 matching piece for piece
// (FuzzPreTokensEqualRegexp) and far faster (BenchmarkPreTokens1MB
// against BenchmarkPreTokensRegexp2_1MB). regexp2
// reads the text as runes ([]rune of the string: an invalid byte is U+FFFD),
// \s is unicode.IsSpace, \p{..} are the standard library's tables and (?i:)
// lowers the text's runes with unicode.ToLower. The scanner's pre-tokens
// are regexp2's on valid UTF-8; preTokens first rewrites invalid text the
// way []rune does, and the counting loop scans first and rewrites only
// text the scanner found invalid (scanner.invalid).
//
// Each alternative is tried in the regex's order, and where an alternative
// can backtrack the first path regexp2 would accept is computed directly:
//
//   - \s*[\r\n]+ takes the whitespace run up to its last \r or \n;
//   - \s+(?!\S) takes the whole run at the end of the text, else the run but
//     its last character (which then starts the next match), if that leaves
//     one; otherwise \s+ takes the single character;
//   - o200k's [U]*[W]+ (U = Lu Lt Lm Lo M, W = Ll Lm Lo M) ends its U run at
//     the last position k of the greedy U run where W can start (the first
//     char after the run if it is W, else the last W char inside it), and W+
//     runs greedily from k;
//   - an optional prefix [^\r\n\p{L}\p{N}]? is first tried taken, then not.

// Rune classes, as bits.
const (
	clsL     = 1 << iota // \p{L}
	clsN                 // \p{N}
	clsSpace             // \s: unicode.IsSpace
	clsNL                // \r or \n
	clsU                 // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	clsW                 // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
)

// bmpClass holds the classes of the runes below 0x10000, built from the
// standard library's range tables (no per-rune lookups), so the scanner
// never searches a table for BMP text.
var bmpClass = func() *[0x10000]uint8 {
	t := new([0x10000]uint8)
	mark := func(tab *unicode.RangeTable, bits uint8) {
		for _, r := range tab.R16 {
			for c := int(r.Lo); c <= int(r.Hi); c += int(r.Stride) {
				t[c] |= bits
			}
		}
		for _, r := range tab.R32 {
			for c := int(r.Lo); c <= int(r.Hi) && c < len(t); c += int(r.Stride) {
				t[c] |= bits
			}
		}
	}
	mark(unicode.L, clsL)
	mark(unicode.N, clsN)
	mark(unicode.White_Space, clsSpace) // unicode.IsSpace beyond Latin-1
	for c := range 0x100 {
		t[c] &^= clsSpace
		if unicode.IsSpace(rune(c)) {
			t[c] |= clsSpace
		}
	}
	t['\r'] |= clsNL
	t['\n'] |= clsNL
	for _, tab := range []*unicode.RangeTable{unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M} {
		mark(tab, clsU)
	}
	for _, tab := range []*unicode.RangeTable{unicode.Ll, unicode.Lm, unicode.Lo, unicode.M} {
		mark(tab, clsW)
	}
	return t
}()

// classOf computes the classes of a rune outside the BMP.
func classOf(r rune) uint8 {
	var c uint8
	if unicode.IsLetter(r) {
		c |= clsL
	}
	if unicode.IsNumber(r) {
		c |= clsN
	}
	if unicode.IsSpace(r) {
		c |= clsSpace
	}
	if unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M) {
		c |= clsU
	}
	if unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M) {
		c |= clsW
	}
	return c
}

// asciiClass is bmpClass below 0x80, as a value: no pointer to load.
var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	copy(t[:], bmpClass[:utf8.RuneSelf])
	return t
}()

// scanner reads UTF-8 text. It decodes every non-ASCII rune it consumes
// (the ASCII fast path stops at them), so it sees any invalid byte, and
// says so (invalid): its pre-tokens are then not tiktoken-go's, which reads
// such text as validUTF8 rewrites it.
type scanner struct {
	s       []byte
	invalid bool
}

// at returns the classes and the size of the rune at i (i < len(s)).
func (sc *scanner) at(i int) (uint8, int) {
	if b := sc.s[i]; b < utf8.RuneSelf {
		return asciiClass[b], 1
	}
	return sc.atMulti(i)
}

func (sc *scanner) atMulti(i int) (uint8, int) {
	r, size := utf8.DecodeRune(sc.s[i:])
	if r == utf8.RuneError && size == 1 {
		sc.invalid = true
	}
	if r < 0x10000 {
		return bmpClass[r], size
	}
	return classOf(r), size
}

// is reports whether the rune at i exists and has one of the classes.
func (sc *scanner) is(i int, cls uint8) bool {
	if i >= len(sc.s) {
		return false
	}
	c, _ := sc.at(i)
	return c&cls != 0
}

// run returns the end of the run of runes from i that have one of cls.
func (sc *scanner) run(i int, cls uint8) int {
	for i < len(sc.s) {
		c, size := sc.at(i)
		if c&cls == 0 {
			break
		}
		i += size
	}
	return i
}

// lowerAt returns unicode.ToLower of the rune at i and its size, (-1, 0)
// at the end.
func (sc *scanner) lowerAt(i int) (rune, int) {
	if i >= len(sc.s) {
		return -1, 0
	}
	r, size := utf8.DecodeRune(sc.s[i:])
	if r == utf8.RuneError && size == 1 {
		sc.invalid = true
	}
	return unicode.ToLower(r), size
}

// contraction matches (?i:'s|'t|'re|'ve|'m|'ll|'d) at i: its end, or -1.
func (sc *scanner) contraction(i int) int {
	if i >= len(sc.s) || sc.s[i] != '\'' {
		return -1
	}
	r1, n1 := sc.lowerAt(i + 1)
	var want rune
	switch r1 {
	case 's', 't', 'm', 'd':
		return i + 1 + n1
	case 'r', 'v':
		want = 'e'
	case 'l':
		want = 'l'
	default:
		return -1
	}
	if r2, n2 := sc.lowerAt(i + 1 + n1); r2 == want {
		return i + 1 + n1 + n2
	}
	return -1
}

// prefixable reports whether the rune at i can be the optional leading
// [^\r\n\p{L}\p{N}] of a word; its size.
func (sc *scanner) prefixable(i int) (bool, int) {
	c, size := sc.at(i)
	return c&(clsNL|clsL|clsN) == 0, size
}

// isPunct reports whether the rune at i exists and is [^\s\p{L}\p{N}].
func (sc *scanner) isPunct(i int) bool {
	if i >= len(sc.s) {
		return false
	}
	c, _ := sc.at(i)
	return c&(clsSpace|clsL|clsN) == 0
}

// punct matches " ?[^\s\p{L}\p{N}]+" then a run of tail bytes at i: its
// end, or -1.
func (sc *scanner) punct(i int, tail func(byte) bool) int {
	j := i
	if sc.s[j] == ' ' {
		j++
	}
	if !sc.isPunct(j) {
		if j == i || !sc.isPunct(i) { // the space is optional: try without
			return -1
		}
		j = i
	}
	for sc.isPunct(j) {
		_, size := sc.at(j)
		j += size
	}
	for j < len(sc.s) && tail(sc.s[j]) {
		j++
	}
	return j
}

// space matches \s*[\r\n]+|\s+(?!\S)|\s+ at i (a whitespace rune): its end.
func (sc *scanner) space(i int) int {
	lastNL, last, j := -1, i, i
	for j < len(sc.s) {
		c, size := sc.at(j)
		if c&clsSpace == 0 {
			break
		}
		if c&clsNL != 0 {
			lastNL = j
		}
		last = j
		j += size
	}
	switch {
	case lastNL >= 0:
		return lastNL + 1
	case j == len(sc.s) || last == i:
		return j
	default:
		return last
	}
}

// digits matches \p{N}{1,3} at i: its end, or -1.
func (sc *scanner) digits(i int) int {
	j := i
	for range 3 {
		if !sc.is(j, clsN) {
			break
		}
		_, size := sc.at(j)
		j += size
	}
	if j == i {
		return -1
	}
	return j
}

// cl100k returns the end of the cl100k_base pre-token starting at i:
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func (sc *scanner) cl100k(i int) int {
	if e := sc.contraction(i); e >= 0 {
		return e
	}
	if ok, size := sc.prefixable(i); ok && sc.is(i+size, clsL) {
		return sc.run(i+size, clsL)
	}
	if sc.is(i, clsL) {
		return sc.run(i, clsL)
	}
	if e := sc.digits(i); e >= 0 {
		return e
	}
	if e := sc.punct(i, isNL); e >= 0 {
		return e
	}
	return sc.space(i)
}

// o200k returns the end of the o200k_base pre-token starting at i:
// [^\r\n\p{L}\p{N}]?[U]*[W]+(?i:'s|…)?|[^\r\n\p{L}\p{N}]?[U]+[W]*(?i:'s|…)?|
// \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
func (sc *scanner) o200k(i int) int {
	pre, size := sc.prefixable(i)
	if pre {
		if e := sc.upperLower(i + size); e >= 0 {
			return e
		}
	}
	if e := sc.upperLower(i); e >= 0 {
		return e
	}
	if pre {
		if e := sc.upperThenLower(i + size); e >= 0 {
			return e
		}
	}
	if e := sc.upperThenLower(i); e >= 0 {
		return e
	}
	if e := sc.digits(i); e >= 0 {
		return e
	}
	if e := sc.punct(i, isNLOrSlash); e >= 0 {
		return e
	}
	return sc.space(i)
}

// upperLower matches [U]*[W]+ and an optional contraction at i: its end, or
// -1.
func (sc *scanner) upperLower(i int) int {
	k, j := -1, i
	for j < len(sc.s) {
		c, size := sc.at(j)
		if c&clsU == 0 {
			break
		}
		if c&clsW != 0 {
			k = j
		}
		j += size
	}
	if sc.is(j, clsW) {
		k = j
	}
	if k < 0 {
		return -1
	}
	return sc.withContraction(sc.run(k, clsW))
}

// upperThenLower matches [U]+[W]* and an optional contraction at i: its
// end, or -1.
func (sc *scanner) upperThenLower(i int) int {
	if !sc.is(i, clsU) {
		return -1
	}
	return sc.withContraction(sc.run(sc.run(i, clsU), clsW))
}

func (sc *scanner) withContraction(e int) int {
	if c := sc.contraction(e); c >= 0 {
		return c
	}
	return e
}

func isNL(b byte) bool        { return b == '\r' || b == '\n' }
func isNLOrSlash(b byte) bool { return b == '\r' || b == '\n' || b == '/' }

// next returns the end of the pre-token at i, under o200k_base's regex if
// o200k, else cl100k_base's.
func (sc *scanner) next(i int, o200k bool) int {
	if sc.s[i] < utf8.RuneSelf {
		e := -1
		if o200k {
			e = sc.asciiO200k(i)
		} else {
			e = sc.asciiCl100k(i)
		}
		if e >= 0 {
			return e
		}
	}
	return sc.general(i, o200k)
}

// general is next past the ASCII fast path: the general scanner.
func (sc *scanner) general(i int, o200k bool) int {
	if o200k {
		return sc.o200k(i)
	}
	return sc.cl100k(i)
}

// validUTF8 returns text, or the bytes tiktoken-go tokenizes instead of
// invalid UTF-8: Go's []rune conversion turns each bad byte into U+FFFD.
func validUTF8(text []byte) []byte {
	if utf8.Valid(text) {
		return text
	}
	return []byte(string([]rune(string(text))))
}

// preTokens calls emit with the pre-tokens of text under the encoding
// (o200k_base when o200k, else cl100k_base), in order, as tiktoken-go cuts
// them; emit sees the bytes validUTF8 gives.
func preTokens(text []byte, o200k bool, emit func([]byte)) {
	text = validUTF8(text)
	sc := scanner{s: text}
	for i := 0; i < len(text); {
		e := sc.next(i, o200k)
		emit(text[i:e])
		i = e
	}
}
