package vault

import (
	"context"
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds of one Search, whatever the vault holds and whatever the query:
// the work is linear in the artifact bytes read, those bytes are capped,
// and a caller that goes away stops the scan within a slice of it.
const (
	// MaxSearchQueryChars bounds a search query, in characters; a longer
	// query is refused (ErrSearchQueryTooLong), never truncated: a cut
	// query would match what the caller did not ask for.
	MaxSearchQueryChars = 256
	// SearchScanBytes bounds the stored artifact bytes (text and raw
	// value) one Search reads, newest artifacts first; older artifacts
	// past it are not searched. At a few nanoseconds a byte (decode and
	// scan), a search costs at most a few tenths of a CPU-second.
	SearchScanBytes = 32 << 20
	// searchCheckBytes is how much text is scanned between two looks at
	// the caller's context.
	searchCheckBytes = 256 << 10
)

// ErrSearchQueryTooLong: the query has more than MaxSearchQueryChars
// characters.
var ErrSearchQueryTooLong = errors.New("vault: search query longer than 256 characters")

// SearchScan is one search's matcher: a case-insensitive substring test
// (strings.Contains of strings.ToLower of both) in time linear in the text
// (Knuth-Morris-Pratt over the lower-cased bytes, folded as they are
// read), with the caller's context looked at every searchCheckBytes and
// the bytes read charged against SearchScanBytes. It is not safe for
// concurrent use.
type SearchScan struct {
	ctx    context.Context
	q      []byte // the lower-cased query
	fail   []int  // KMP failure function of q
	budget int64  // bytes that may still be read
	since  int    // bytes scanned since the last look at ctx
	done   int64  // bytes scanned before that
}

// NewSearchScan returns the matcher of query, or ErrSearchQueryTooLong.
func NewSearchScan(ctx context.Context, query string) (*SearchScan, error) {
	if utf8.RuneCountInString(query) > MaxSearchQueryChars {
		return nil, ErrSearchQueryTooLong
	}
	s := newScan(ctx, strings.ToLower(query))
	s.budget = SearchScanBytes
	return s, nil
}

// newScan returns an unbudgeted matcher of lower (already lower-cased).
func newScan(ctx context.Context, lower string) *SearchScan {
	q := []byte(lower)
	fail := make([]int, len(q))
	for i, k := 1, 0; i < len(q); i++ {
		for k > 0 && q[i] != q[k] {
			k = fail[k-1]
		}
		if q[i] == q[k] {
			k++
		}
		fail[i] = k
	}
	return &SearchScan{ctx: ctx, q: q, fail: fail}
}

// Charge takes n bytes (a record about to be read) from the search's
// budget; false when they do not fit: the search ends there.
func (s *SearchScan) Charge(n int64) bool {
	if n > s.budget {
		s.budget = 0
		return false
	}
	s.budget -= n
	return true
}

// Scanned is the number of text bytes matched so far.
func (s *SearchScan) Scanned() int64 { return s.done + int64(s.since) }

// Err is the caller's context's error, looked at now.
func (s *SearchScan) Err() error { return s.ctx.Err() }

// Match reports whether tool or text contains the query, ignoring case as
// strings.ToLower does; an empty query matches everything. The error is
// the context's when it ended during the scan.
func (s *SearchScan) Match(text []byte, tool string) (bool, error) {
	if len(s.q) == 0 {
		return true, nil
	}
	if ok, err := s.contains(StringBytes(tool)); ok || err != nil {
		return ok, err
	}
	return s.contains(text)
}

// contains runs the automaton over text lower-cased rune by rune, exactly
// as strings.ToLower maps it (an invalid byte reads as U+FFFD).
func (s *SearchScan) contains(text []byte) (bool, error) {
	q, fail := s.q, s.fail
	if len(q) == 0 {
		return true, nil
	}
	j := 0
	var enc [utf8.UTFMax]byte
	for i := 0; i < len(text); {
		if s.since >= searchCheckBytes {
			s.done += int64(s.since)
			s.since = 0
			if err := s.ctx.Err(); err != nil {
				return false, err
			}
		}
		c := text[i]
		if c < utf8.RuneSelf {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			for j > 0 && c != q[j] {
				j = fail[j-1]
			}
			if c == q[j] {
				if j++; j == len(q) {
					s.since++
					return true, nil
				}
			}
			i++
			s.since++
			continue
		}
		r, size := utf8.DecodeRune(text[i:])
		i += size
		s.since += size
		n := utf8.EncodeRune(enc[:], unicode.ToLower(r)) // RuneError for a bad byte, as strings.Map writes it
		for _, c := range enc[:n] {
			for j > 0 && c != q[j] {
				j = fail[j-1]
			}
			if c == q[j] {
				if j++; j == len(q) {
					return true, nil
				}
			}
		}
	}
	return false, nil
}
