package compiler

import (
	"encoding/hex"
	"slices"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// TestChainGolden pins the canonical conversation chain: its hashes are
// stored in vaults as lineage, so a change of the canonical form (or of how
// it is fed to SHA-256) would make every recorded conversation unknown.
// The messages cover every kind, key order, cache_control, escapes that
// decode alike, and long strings (hashed through the text cache).
func TestChainGolden(t *testing.T) {
	long := strings.Repeat("line é\\n\\\"q\\\"\\t", 200)
	body := `{"messages":[` +
		`{"role":"system","content":"You are a coding agent.","cache_control":{"type":"ephemeral"}},` +
		`{"content":"caf\u00e9 \"x\"","role":"user","n":[1,-2.5e3,true,false,null,{}, []]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"` + long + `"}` +
		`]}`
	src := []byte(body)
	root, err := jsonv.Parse(src, 0)
	if err != nil {
		t.Fatal(err)
	}
	units := root.Get("messages").Elems
	for _, cache := range []*textCache{nil, newTextCache()} {
		for round := 0; round < 2; round++ { // the second round hits the text cache
			chain := newHasher(src, cache).chain("openai_chat", units)
			got := make([]string, len(chain))
			for i, d := range chain {
				got[i] = hex.EncodeToString(d[:8])
			}
			want := []string{"67d32aafdde517e0", "93ef294549d92902", "8e0c571eb7ae9fba", "b92ec94994bd7ee4"}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("chain = %v, want %v", got, want)
			}
		}
	}
	// The same conversation spelled otherwise: keys reordered, whitespace,
	// cache_control moved, the same text escaped differently, Codex's
	// metadata on an item.
	other := []byte(`{"messages":[` +
		`{"content":"You are a coding agent.", "role":"system","internal_chat_message_metadata_passthrough":{"turn_id":"t1"}},` +
		`{"n":[1,-2.5e3,true,false,null,{},[]],"role":"user","content":"café \u0022x\"","cache_control":{"type":"ephemeral"}},` +
		`{"tool_calls":[{"function":{"arguments":"{\"command\":\"ls\"}","name":"bash"},"type":"function","id":"call_1"}],"content":null,"role":"assistant"},` +
		`{"content":"` + long + `","tool_call_id":"call_1","role":"tool"}` +
		`]}`)
	oroot, err := jsonv.Parse(other, 0)
	if err != nil {
		t.Fatal(err)
	}
	a := newHasher(src, nil).chain("openai_chat", units)
	b := newHasher(other, nil).chain("openai_chat", oroot.Get("messages").Elems)
	if a[len(a)-1] != b[len(b)-1] {
		t.Fatal("the same conversation spelled otherwise has another chain")
	}
	if c := newHasher(src, nil).chain("anthropic_messages", units); c[0] == a[0] {
		t.Fatal("the format does not seed the chain")
	}
}

// A message's hash is remembered by its bytes for its tenant: the chain
// of a resent body comes from memory and equals the walked one, a changed
// message (between or inside its long strings) is walked again, and no
// tenant is answered from another's messages.
func TestMessageOfRemembers(t *testing.T) {
	base := fixtures.ChatBody("gpt-4o", fixtures.Turns(7, 6, 3000), "")
	cache := newTextCache()
	chain := func(body []byte, tenant string) (got, want []artifact.Digest, remembered int) {
		t.Helper()
		known := newKnownStrings(cache, tenant)
		pd, reason := parseDocKnown(chatFormat{}, body, cache, known)
		if reason != "" {
			t.Fatal(reason)
		}
		got = pd.hasher.chain("openai_chat", pd.units)
		want = newHasher(body, nil).chain("openai_chat", pd.units)
		return got, want, pd.hasher.remembered
	}
	edit := func(old, new string) []byte {
		if !strings.Contains(string(base), old) {
			t.Fatalf("no %q in the body", old)
		}
		return []byte(strings.Replace(string(base), old, new, 1))
	}
	units := 0
	for _, tc := range []struct {
		name       string
		body       []byte
		tenant     string
		remembered func(units int) int
	}{
		{"first", base, "A", func(int) int { return 0 }},
		{"resent", base, "A", func(u int) int { return u }},
		{"another tenant", base, "B", func(int) int { return 0 }},
		{"a byte between the long strings", edit(`"role":"system"`, `"role":"systen"`), "A", func(u int) int { return u - 1 }},
		{"a byte before a long string", edit(`{"content":"     1`, `{"contenu":"     1`), "A", func(u int) int { return u - 1 }},
		{"a byte inside a long string", edit("return", "retuRn"), "A", func(u int) int { return u - 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, want, remembered := chain(tc.body, tc.tenant)
			if units == 0 {
				units = len(got)
			}
			if !slices.Equal(got, want) {
				t.Fatal("the chain differs from the one walked without the cache")
			}
			if w := tc.remembered(units); remembered != w {
				t.Fatalf("%d of %d messages remembered, want %d", remembered, units, w)
			}
		})
	}
}
