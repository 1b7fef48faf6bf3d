package tokens

import (
	"sync"
)

// encoding is one tokenizer: its pre-tokenizer (pretoken.go) and its rank
// table (bpe.go), built once per process. New builds the tables of the
// encodings a Counter can use, so no request ever waits for them; the
// Counters of every configuration share them.
type encoding struct {
	name  string
	id    uint8
	o200k bool // o200k_base's pre-tokenizer, else cl100k_base's
	once  sync.Once
	ranks *ranks
	err   error
}

var encodings = []*encoding{
	{name: "o200k_base", id: 0, o200k: true},
	{name: "cl100k_base", id: 1},
}

func encodingNamed(name string) *encoding {
	for _, e := range encodings {
		if e.name == name {
			return e
		}
	}
	return nil
}

// load builds the tables, once per process (tens of milliseconds each).
func (e *encoding) load() (*ranks, error) {
	e.once.Do(func() { e.ranks, e.err = loadRanks(e.name) })
	return e.ranks, e.err
}

// maxPreToken bounds the pre-tokens we merge: the byte-pair merge is
// quadratic in a pre-token's length (16 KB of spaces take ~0.1 s, 1 MB would
// take minutes), so a body holding a longer one is not counted.
const maxPreToken = 16 << 10

// count returns the number of tokens of text, as tiktoken's
// encode_ordinary counts them (special-token text is ordinary text); false
// if a pre-token is too long to merge in reasonable time (see maxPreToken).
func (e *encoding) count(r *ranks, text []byte) (n int, ok bool) {
	ok = true
	preTokens(text, e.o200k, func(p []byte) {
		if len(p) > maxPreToken {
			ok = false
		}
		if ok {
			n += r.count(p)
		}
	})
	return n, ok
}

// encode returns the token ids of text (tests compare them with
// tiktoken-go's).
func (e *encoding) encode(r *ranks, text []byte) []int {
	var out []int
	preTokens(text, e.o200k, func(p []byte) { out = r.encode(p, out) })
	return out
}
