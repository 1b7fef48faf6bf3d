package tokens

import "unicode/utf8"

// byteClass is asciiClass for every byte: bytes of multi-byte runes have
// no class, so a run over it stops at them (and the caller then checks).
var byteClass = func() (t [256]uint8) {
	copy(t[:], asciiClass[:])
	return t
}()

// runOf returns the end of the run of ASCII bytes from e that have one of
// cls.
func runOf(s []byte, e int, cls uint8) int {
	for _, ch := range s[e:] {
		if byteClass[ch]&cls == 0 {
			break
		}
		e++
	}
	return e
}

// ascii is the scanner's fast path for a pre-token in ASCII text, the bulk
// of agent traffic: the same regexes, read with the classes of ASCII bytes
// only. It returns -1 as soon as the answer could depend on a non-ASCII
// rune (one inside the pre-token or right after a run it ends), and the
// general scanner (pretoken.go) decides instead. In ASCII, U is [A-Z], W is
// [a-z], \p{L} is [A-Za-z], \p{N} is [0-9], and \s is [\t\n\v\f\r ].
func (sc *scanner) ascii(i int, o200k bool) int {
	s := sc.s
	c := asciiClass[s[i]]
	if !o200k && s[i] == '\'' {
		if e := sc.contraction(i); e >= 0 {
			return e
		}
	}
	// A word, with one leading [^\r\n\p{L}\p{N}] if a letter follows it.
	j := i
	if c&(clsL|clsN|clsNL) == 0 && i+1 < len(s) {
		next := s[i+1]
		if next >= utf8.RuneSelf {
			return -1
		}
		if asciiClass[next]&clsL != 0 {
			j, c = i+1, asciiClass[next]
		}
	}
	if c&clsL != 0 {
		e := j
		if o200k { // [U]*[W]+ or [U]+[W]*: both end after [A-Z]*[a-z]*
			e = runOf(s, runOf(s, e, clsU), clsW)
		} else {
			e = runOf(s, e, clsL)
		}
		if e < len(s) && s[e] >= utf8.RuneSelf {
			return -1
		}
		if o200k && e < len(s) && s[e] == '\'' {
			return sc.withContraction(e)
		}
		return e
	}
	switch {
	case c&clsN != 0: // \p{N}{1,3}
		e := i + 1
		for e < len(s) && e < i+3 && s[e] < utf8.RuneSelf && asciiClass[s[e]]&clsN != 0 {
			e++
		}
		if e < len(s) && e < i+3 && s[e] >= utf8.RuneSelf {
			return -1
		}
		return e
	case c&clsSpace == 0 || s[i] == ' ' && i+1 < len(s) && asciiClass[s[i+1]]&(clsSpace|clsL|clsN) == 0:
		// ?[^\\s\\p{L}\\p{N}]+ then newlines (o200k: and slashes); s[i+1]
		// is ASCII here (checked above for a space).
		e := i
		if s[e] == ' ' {
			e++
		}
		for e < len(s) && s[e] < utf8.RuneSelf && asciiClass[s[e]]&(clsSpace|clsL|clsN) == 0 {
			e++
		}
		if e < len(s) && s[e] >= utf8.RuneSelf {
			return -1
		}
		for e < len(s) && (s[e] == '\r' || s[e] == '\n' || o200k && s[e] == '/') {
			e++
		}
		return e
	}
	// \s*[\r\n]+|\s+(?!\S)|\s+
	lastNL, e := -1, i
	for e < len(s) && s[e] < utf8.RuneSelf && asciiClass[s[e]]&clsSpace != 0 {
		if s[e] == '\r' || s[e] == '\n' {
			lastNL = e
		}
		e++
	}
	switch {
	case e < len(s) && s[e] >= utf8.RuneSelf:
		return -1
	case lastNL >= 0:
		return lastNL + 1
	case e == len(s) || e == i+1:
		return e
	default:
		return e - 1
	}
}
