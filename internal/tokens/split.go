package tokens

// Why the pieces' counts add up to the whole body's count, exactly.
//
// tiktoken splits text into pre-tokens with the encoding's regex (leftmost
// match, then the next match from where it ended) and BPE-encodes every
// pre-token on its own; no token ever spans two pre-tokens. Both regexes
// (tiktoken-go v0.1.8, encoding.go):
//
//	cl100k_base  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//	             ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//	o200k_base   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|…)?|
//	             [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|…)?|
//	             \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// have no anchors and no look-behind, every alternative consumes at least one
// character, and any character starts some alternative, so the matches tile
// the text. We cut text T into A = T[:p] and B = T[p:] only where x = T[p-1]
// is an ASCII letter or digit and y = T[p] is ASCII, neither a letter, a
// digit nor an apostrophe (a space, `"`, `\`, `,`, `:`, a newline, ...).
//
//  1. p is a boundary of T's pre-tokens. Reading the regexes, the only
//     adjacent pairs one match can hold with a letter or digit first are
//     letter+letter (or mark), letter+apostrophe (o200k contractions) and
//     digit+digit. Apostrophe starts a match of its own in cl100k. So no
//     match holds x and y together: a match ends at p.
//  2. B's pre-tokens are T's from p on: a match attempt at q >= p reads only
//     T[q:], since there is no look-behind or anchor.
//  3. A's pre-tokens are T's before p. A match attempt at s < p explores the
//     same backtracking tree in A and in T, except that in A nothing can be
//     consumed at p (end of text). The match T found ends by p (step 1), so
//     it did not consume past p; the paths before it failed in T, and fail in
//     A as well (consuming end of text fails). The only construct that can
//     succeed on end of text is the look-ahead (?!\S); it would be evaluated
//     at p only right after \s+ consumed x, and x is not whitespace.
//
// Hence pre-tokens(T) = pre-tokens(A) ++ pre-tokens(B) and the counts add.
// Positions are on rune boundaries (x and y are ASCII), and Go's []rune
// conversion of invalid UTF-8 decodes the same on either side of an ASCII
// byte, so the argument holds byte for byte. The argument uses only the class
// of the two ASCII bytes around p, never the rest of the text, so any choice
// among such positions composes exactly; FuzzComposedEqualsDirect checks it
// against direct counts.

// Byte classes for the cut rule.
const (
	alnum  = 1 << iota // x may end a piece: ASCII letter or digit
	follow             // y may start a piece: ASCII, not letter, digit or '
)

var class = func() (c [256]uint8) {
	for b := 0; b < 0x80; b++ {
		switch {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
			c[b] = alnum
		case b != '\'':
			c[b] = follow
		}
	}
	return c
}()

// cutOK reports whether b may be cut before b[p] (0 < p < len(b)).
func cutOK(b []byte, p int) bool {
	return class[b[p-1]]&alnum != 0 && class[b[p]]&follow != 0
}

// gear is the table of a gear rolling hash (FastCDC): h = h<<1 + gear[b]
// depends only on the last 64 bytes, so cut choices depend on local content
// and resynchronize after an insertion: a resent history yields the same
// pieces, and only pieces around new bytes are new.
var gear = func() (g [256]uint64) {
	x := uint64(0x9e3779b97f4a7c15)
	for i := range g { // splitmix64: fixed, so pieces are stable across runs
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		g[i] = z ^ z>>31
	}
	return g
}()

// Piece sizes: pieces are at least minPiece bytes and about
// minPiece + 1<<avgBits on average. Small enough that the piece holding the
// edge between old and new content costs little to recount, large enough
// that a 1 MB body is a few hundred cache lookups.
const (
	minPiece = 512
	avgBits  = 11
)

// split calls emit with consecutive pieces of b whose token counts add up to
// the count of b. A cut is armed once a piece is at least minSize long and
// the top bits of the rolling hash are zero (the top bits depend on all 64
// bytes of the window, the low ones only on the last few), and made at the
// next position where cutOK holds. Text without such positions (e.g. a long
// CJK run) stays one piece.
func split(b []byte, minSize int, bits uint, emit func([]byte)) {
	// h>>(64-bits) == 0 as a mask test (no variable shift in the loop);
	// bits 0 makes the mask 0: every position arms.
	mask := ^uint64(0) << (64 - bits)
	for start := 0; start < len(b); {
		// The hash only needs the 64 bytes before the first armable position.
		p := max(start+1, start+minSize-64)
		var h uint64
		if end := min(start+minSize, len(b)); p < end {
			for _, c := range b[p-1 : end-1] {
				h = h<<1 + gear[c]
			}
			p = end
		}
		if p < len(b) {
			armed := len(b)
			for i, c := range b[p-1 : len(b)-1] { // c is b[q-1] for q = p+i
				h = h<<1 + gear[c]
				if h&mask == 0 {
					armed = p + i
					break
				}
			}
			p = armed
		}
		for p < len(b) && !cutOK(b, p) {
			p++
		}
		if p >= len(b) {
			p = len(b)
		}
		emit(b[start:p])
		start = p
	}
}
