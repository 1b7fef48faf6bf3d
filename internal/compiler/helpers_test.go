package compiler_test

import (
	"context"
	"encoding/json"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
)

// strDigest is the artifact identity of a tool result sent as the JSON
// string json.Marshal writes for s.
func strDigest(s string) artifact.Digest {
	raw, _ := json.Marshal(s)
	return artifact.DigestOf(s, raw)
}

// storedDigest is the digest under which store holds tenant's artifact
// whose text is text (the zero digest when none): tests whose fixtures
// spell tool results in several ways find it by its content, then Get it.
func storedDigest(store *compilertest.MemStore, tenant, text string) artifact.Digest {
	for _, a := range store.All(tenant) {
		if a.Text == text {
			if g, ok, _ := store.Get(context.Background(), tenant, a.Digest); ok && g.Text == text {
				return a.Digest
			}
		}
	}
	return artifact.Digest{}
}

// resultText is a tool result's content as the model reads it: a string,
// or the text of an Anthropic receipt block list (one text block); marked
// reports whether that block carries a cache_control breakpoint.
func resultText(v any) (text string, marked bool) {
	if l, ok := v.([]any); ok && len(l) == 1 {
		b, _ := l[0].(map[string]any)
		text, _ = b["text"].(string)
		return text, b["cache_control"] != nil
	}
	text, _ = v.(string)
	return text, false
}
