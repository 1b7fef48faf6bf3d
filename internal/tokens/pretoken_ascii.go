package tokens

// The scanner's fast path for pre-tokens in ASCII text, the bulk of agent
// traffic: the same regexes (split.go), read with the classes of ASCII
// bytes only, one function per encoding so that neither tests which one it
// is on every byte. Each returns -1 as soon as the answer could depend on a
// non-ASCII rune (one inside the pre-token, or right after a run it ends),
// and the general scanner (pretoken.go) decides instead. In ASCII, U is
// [A-Z], W is [a-z], \p{L} is [A-Za-z], \p{N} is [0-9], and \s is
// [\t\n\v\f\r ]. FuzzPreTokensEqualRegexp holds both to regexp2.

// Byte classes of the fast path. Every byte has exactly one of the first
// six, so a run over a class stops at a non-ASCII byte (high) as at any
// other.
const (
	bUpper = 1 << iota // [A-Z]
	bLower             // [a-z]
	bDigit             // [0-9]
	bSpace             // \s in ASCII
	bPunct             // ASCII, not \s, a letter or a digit
	bHigh              // a byte of a multi-byte rune
	bNL                // \r or \n (also bSpace)
	bTail              // what o200k's punctuation takes after its run: \r \n /

	bLetter = bUpper | bLower
)

var asciiByte = func() (t [256]uint8) {
	for c := range 256 {
		switch {
		case c >= 0x80:
			t[c] = bHigh
		case 'A' <= c && c <= 'Z':
			t[c] = bUpper
		case 'a' <= c && c <= 'z':
			t[c] = bLower
		case '0' <= c && c <= '9':
			t[c] = bDigit
		case asciiClass[c]&clsSpace != 0:
			t[c] = bSpace
		default:
			t[c] = bPunct
		}
	}
	t['\r'] |= bNL | bTail
	t['\n'] |= bNL | bTail
	t['/'] |= bTail
	return t
}()

// runOf returns the end of the run of bytes from e that have one of cls.
func runOf(s []byte, e int, cls uint8) int {
	for e < len(s) && asciiByte[s[e]]&cls != 0 {
		e++
	}
	return e
}

// highAt reports whether s[e] exists and is part of a multi-byte rune.
func highAt(s []byte, e int) bool { return e < len(s) && s[e] >= 0x80 }

// wordStart reads the optional [^\r\n\p{L}\p{N}] before a word, the
// same in both regexes: punctuation or a space other than a newline, taken
// when a letter follows. It returns the class that decides the pre-token
// at s[i] (the letter's when taken) and where a word's letters would
// start; w < 0 when a non-ASCII rune follows (it may be a letter).
func wordStart(s []byte, i int) (c uint8, w int) {
	c, w = asciiByte[s[i]], i
	if c&(bPunct|bSpace) != 0 && c&bNL == 0 && i+1 < len(s) {
		switch n := asciiByte[s[i+1]]; {
		case n&bLetter != 0:
			c, w = n, i+1
		case n&bHigh != 0:
			w = -1
		}
	}
	return c, w
}

// asciiO200k is the fast path of o200k_base's regex at s[i] (ASCII).
func (sc *scanner) asciiO200k(i int) int {
	s := sc.s
	c, w := wordStart(s, i)
	if w < 0 {
		return -1
	}
	e := i + 1
	switch {
	case c&bLetter != 0:
		// [U]*[W]+ and [U]+[W]* both end after [A-Z]*[a-z]*, then an
		// optional contraction.
		e = runOf(s, runOf(s, w, bUpper), bLower)
		if e < len(s) {
			switch s[e] {
			case '\'':
				return sc.withContraction(e)
			default:
				if s[e] >= 0x80 {
					return -1
				}
			}
		}
		return e
	case c&bDigit != 0: // \p{N}{1,3}
		return asciiDigits(s, i)
	case c&bPunct != 0 || s[i] == ' ' && e < len(s) && asciiByte[s[e]]&bPunct != 0:
		// ?[^\s\p{L}\p{N}]+[\r\n/]*
		e = runOf(s, e, bPunct)
		if highAt(s, e) {
			return -1
		}
		return runOf(s, e, bTail)
	}
	return asciiSpace(s, i)
}

// asciiCl100k is the fast path of cl100k_base's regex at s[i] (ASCII).
func (sc *scanner) asciiCl100k(i int) int {
	s := sc.s
	if s[i] == '\'' {
		if e := sc.contraction(i); e >= 0 {
			return e
		}
	}
	c, w := wordStart(s, i)
	if w < 0 {
		return -1
	}
	e := i + 1
	switch {
	case c&bLetter != 0: // \p{L}+
		e = runOf(s, w, bLetter)
		if highAt(s, e) {
			return -1
		}
		return e
	case c&bDigit != 0:
		return asciiDigits(s, i)
	case c&bPunct != 0 || s[i] == ' ' && e < len(s) && asciiByte[s[e]]&bPunct != 0:
		// ?[^\s\p{L}\p{N}]+[\r\n]*
		e = runOf(s, e, bPunct)
		if highAt(s, e) {
			return -1
		}
		return runOf(s, e, bNL)
	}
	return asciiSpace(s, i)
}

// asciiDigits matches \p{N}{1,3} at a digit s[i].
func asciiDigits(s []byte, i int) int {
	e := i + 1
	for e < len(s) && e < i+3 && asciiByte[s[e]]&bDigit != 0 {
		e++
	}
	if e < i+3 && highAt(s, e) {
		return -1
	}
	return e
}

// asciiSpace matches \s*[\r\n]+|\s+(?!\S)|\s+ at a whitespace s[i], or
// returns -1 (a non-ASCII rune right after the run may be whitespace).
func asciiSpace(s []byte, i int) int {
	lastNL, e := -1, i
	for ; e < len(s); e++ {
		c := asciiByte[s[e]]
		if c&bSpace == 0 {
			if c&bHigh != 0 {
				return -1
			}
			break
		}
		if c&bNL != 0 {
			lastNL = e
		}
	}
	switch {
	case lastNL >= 0:
		return lastNL + 1
	case e == len(s) || e == i+1:
		return e
	default:
		return e - 1
	}
}
