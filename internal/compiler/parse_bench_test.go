package compiler

import (
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/splice"
)

// The two parses of a warm 1 MB request (the body of BenchCompile1MB, its
// 50 tool results resent): the body's, its long strings known from the
// request before, and the check's parse of a rewrite that receipts them.
func BenchmarkParse1MBWarm(b *testing.B) {
	turns := fixtures.Turns(1000, 51, 20000)
	prev, body := fixtures.ChatBody("gpt-4o", turns[:50], ""), fixtures.ChatBody("gpt-4o", turns, "")
	cache := newTextCache()
	if _, err := jsonv.ParseKnown(prev, maxDepthForRequests, newKnownStrings(cache, "t")); err != nil {
		b.Fatal(err)
	}
	known := newKnownStrings(cache, "t")
	root, err := jsonv.ParseKnown(body, maxDepthForRequests, known)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("body", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, err := jsonv.ParseKnown(body, maxDepthForRequests, newKnownStrings(cache, "t")); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The rewrite: every tool result but the newest becomes a short string.
	var edits []edit
	msgs := root.Get("messages")
	for _, m := range msgs.Elems[:len(msgs.Elems)-1] {
		if c := m.Get("content"); c != nil && m.Get("tool_call_id") != nil {
			edits = append(edits, edit{start: c.Start, end: c.End, at: c.Start, repl: []byte(`"[receipt]"`)})
		}
	}
	out, err := splice.Reserve(body, edits, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("rewrite", func(b *testing.B) {
		b.SetBytes(int64(len(out)))
		for b.Loop() {
			if _, err := jsonv.ParseKnown(out, maxDepthForRequests, &unchangedStrings{orig: body, strs: known.keys, edits: edits}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
