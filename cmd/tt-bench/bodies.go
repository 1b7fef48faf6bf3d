package main

import (
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

// commonWords are the words every conversation shares (fixtures.NovelTurns).
var commonWords = fixtures.CommonWords()

// conversation generates the requests of one agent conversation k: prev
// delivers results tool results, body repeats them and adds one more (so
// all results of prev go out as receipts once prev was seen). Its content
// is new to the process (fixtures.NovelTurns).
func conversation(sh shape, salt uint64, k, results int) (prev, body []byte) {
	turns := fixtures.NovelTurns(salt, k, results+1, outputChars)
	return sh.render(turns[:results]), sh.render(turns)
}

// small is a request of the shape with no tool results: a new tenant's
// first request, which verifies it.
func (s shape) small() []byte { return s.render(nil) }
