package compiler

import (
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// bodyKey names a body's bytes: the same bytes give the same key however
// the parse came by its long strings' keys (scanned or known), and any
// other bytes, tenant or model give another.
func TestBodyKey(t *testing.T) {
	turns := fixtures.Turns(5, 4, 3000)
	base := fixtures.ChatBody("gpt-4o", turns, "")
	c := newTextCache()
	key := func(body []byte, salt string) (textKey, bool) {
		k := newKnownStrings(c, "A")
		if _, reason := parseDocKnown(chatFormat{}, body, c, k); reason != "" {
			t.Fatal(reason)
		}
		return k.bodyKey(body, salt)
	}
	want, ok := key(base, "A\x00gpt-4o")
	if !ok {
		t.Fatal("no key")
	}
	if again, _ := key(base, "A\x00gpt-4o"); again != want { // now from known strings
		t.Fatal("the same bytes, parsed again, have another key")
	}
	edit := func(f func(string) string) []byte { return []byte(f(string(base))) }
	for _, tc := range []struct {
		name string
		body []byte
		salt string
	}{
		{"other tenant", base, "B\x00gpt-4o"},
		{"other model", base, "A\x00gpt-4.1"},
		{"a byte between the long strings", edit(func(s string) string { return strings.Replace(s, `"role":"system"`, `"role":"systen"`, 1) }), "A\x00gpt-4o"},
		{"a byte inside a long string", edit(func(s string) string { return strings.Replace(s, "return", "retuRn", 1) }), "A\x00gpt-4o"},
		{"bytes moved across a long string's edge", edit(func(s string) string { return strings.Replace(s, `"content":"     1`, `"content":"      1`, 1) }), "A\x00gpt-4o"},
		{"another turn", fixtures.ChatBody("gpt-4o", fixtures.Turns(5, 5, 3000), ""), "A\x00gpt-4o"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if string(tc.body) == string(base) && tc.salt == "A\x00gpt-4o" {
				t.Fatal("the case changes nothing")
			}
			got, ok := key(tc.body, tc.salt)
			if !ok || got == want {
				t.Fatalf("key %v (ok %v), the original's is %v", got, ok, want)
			}
		})
	}
	var none *knownStrings
	if _, ok := none.bodyKey(base, ""); ok {
		t.Fatal("a key without the parse's keys")
	}
}
