package main

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// shape is one provider request format.
type shape struct {
	name, path string
	render     func(turns []fixtures.ChatTurn) []byte
}

var shapes = []shape{
	{"chat", "/v1/chat/completions", func(t []fixtures.ChatTurn) []byte { return fixtures.ChatBody("gpt-4o", t, "") }},
	{"responses", "/v1/responses", func(t []fixtures.ChatTurn) []byte {
		return fixtures.ResponsesBody("gpt-4.1", t, "", fixtures.ResponsesOptions{})
	}},
	{"anthropic", "/v1/messages", func(t []fixtures.ChatTurn) []byte {
		return fixtures.AnthropicBody("claude-sonnet-4-5", t, "", fixtures.AnthropicOptions{})
	}},
}

func shapeNamed(name string) (shape, bool) {
	for _, s := range shapes {
		if s.name == name {
			return s, true
		}
	}
	return shape{}, false
}

// outputChars is the size of one generated tool result; a request of size S
// delivers S/outputChars of them.
const outputChars = 20000

// commonWords are the words every generated repository shares: keywords
// and punctuation that any real first exposure finds already counted.
var commonWords = []string{"def", "return", "self", "import", "value", "if", "else", "for", "in", "range",
	"print", "None", "True", "config", "request", "=", "(", ")", ":", "#", "héllo", "日本", "✓", "{", "}",
	"0", "1", "len", "err", "nil", "func", "string", "int", "error", "ctx", "data", "path", "name"}

// conversation generates the requests of one agent conversation: prev
// delivers results tool results, body repeats them and adds one more (so
// all results of prev go out as receipts when prev was seen). Every
// conversation has its own vocabulary of identifiers (as a new repository
// would): random lowercase words, seeded by salt and k, that no other
// conversation of the process uses, so that a cold request gets no
// pre-token memo or piece cache hit the real first exposure of new
// content would not get. Within a conversation identifiers repeat, as they
// do in real tool output.
func conversation(sh shape, salt uint64, k, results int) (prev, body []byte) {
	r := rand.New(rand.NewPCG(salt, uint64(k)))
	vocab := make([]string, 400)
	for i := range vocab {
		var b strings.Builder
		for n := 4 + r.IntN(9); n > 0; n-- {
			b.WriteByte(byte('a' + r.IntN(26)))
		}
		if r.IntN(3) == 0 {
			b.WriteByte('_')
			b.WriteString(commonWords[r.IntN(len(commonWords))])
		}
		vocab[i] = b.String()
	}
	turns := make([]fixtures.ChatTurn, results+1)
	for i := range turns {
		turns[i] = fixtures.ChatTurn{
			Tool:   "bash",
			Args:   fmt.Sprintf(`{"command":"cat %s/%s_%d.py"}`, vocab[0], vocab[1+i%len(vocab[1:])], i),
			Output: toolOutput(r, vocab, outputChars),
		}
	}
	return sh.render(turns[:results]), sh.render(turns)
}

// toolOutput is a listing of source lines of about n characters: line
// numbers, a tab, words of the conversation's vocabulary (Zipf-like: a few
// identifiers often, most rarely) mixed with common words, and a quoted
// string, so that JSON escapes come every few dozen bytes as in real output.
func toolOutput(r *rand.Rand, vocab []string, n int) string {
	z := rand.NewZipf(r, 1.1, 4, uint64(len(vocab)-1))
	var b strings.Builder
	b.Grow(n + 200)
	for line := 1; b.Len() < n; line++ {
		fmt.Fprintf(&b, "%6d\t", line)
		for w := 3 + r.IntN(8); w > 0; w-- {
			if r.IntN(2) == 0 {
				b.WriteString(vocab[z.Uint64()])
			} else {
				b.WriteString(commonWords[r.IntN(len(commonWords))])
			}
			b.WriteByte(' ')
		}
		b.WriteString("\"q\"\n")
	}
	return b.String()
}
