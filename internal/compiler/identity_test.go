package compiler_test

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// Artifact identity is the exact value a receipt replaced, not its lossy
// decoding: values that decode to the same text (a string against text
// parts, parts joined differently, lone surrogates that both decode to
// U+FFFD, two escape spellings) are distinct artifacts, and each restores
// byte for byte: Get's Raw is exactly the bytes that request's receipt
// replaced, whichever spelling was stored first. One store and one compiler
// (its text cache warm with the earlier spellings) serve every case.
func TestArtifactIdentityIsTheExactValue(t *testing.T) {
	x := fixtures.ToolOutput(61, 5000)
	y := fixtures.ToolOutput(62, 5000)
	str := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	part := func(ss ...string) string {
		var p []string
		for _, s := range ss {
			p = append(p, `{"type":"text","text":`+str(s)+`}`)
		}
		return "[" + strings.Join(p, ",") + "]"
	}
	// Each value twice in one request: the older copy is a receipt.
	body := func(value string) []byte {
		return []byte(`{"model":"gpt-4o","messages":[` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{}"}}]},` +
			`{"role":"tool","tool_call_id":"c1","content":` + value + `},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"c2","type":"function","function":{"name":"read","arguments":"{}"}}]},` +
			`{"role":"tool","tool_call_id":"c2","content":` + value + `},` +
			`{"role":"assistant","content":"ok"}]}`)
	}
	lone := strings.Repeat("z", 9000)
	respelled := strings.Replace(str(x+y), "e", `\u0065`, 1)
	cases := []struct{ name, value string }{
		{"string X+Y", str(x + y)},
		{"parts [X, Y]", part(x, y)},
		{"parts [X+Y]", part(x + y)},
		{"string X+Y respelled", respelled},
		{"lone surrogate ud800", `"` + lone + `\ud800"`},
		{"lone surrogate udbff", `"` + lone + `\udbff"`},
	}
	store := compilertest.NewMemStore()
	c := newCompiler(t, compiler.Options{}, store, nil)
	ids := map[string]string{}
	for pass := 0; pass < 2; pass++ { // the second pass runs on a warm text cache and a full store
		for _, tc := range cases {
			b := body(tc.value)
			res := compile(c, "t", b)
			if res.Decision != compiler.Accepted || res.Receipts != 1 {
				t.Fatalf("%s: %s/%s receipts %d", tc.name, res.Decision, res.Reason, res.Receipts)
			}
			assertSpliced(t, b, res.Body)
			m := receiptIDRE.FindSubmatch(res.Body)
			if m == nil {
				t.Fatalf("%s: no receipt", tc.name)
			}
			id := string(m[1])
			if other, ok := ids[id]; ok && other != tc.name {
				t.Fatalf("%s and %s share artifact a_%s", tc.name, other, id)
			}
			ids[id] = tc.name
			a := artifactByID(t, store, "t", id)
			if !bytes.Equal(a.Raw, []byte(tc.value)) {
				t.Fatalf("%s: restores %d bytes %.40q, want its own %d bytes", tc.name, len(a.Raw), a.Raw, len(tc.value))
			}
			if artifact.DigestOf(a.Text, a.Raw) != a.Digest {
				t.Fatalf("%s: stored under a digest that is not its identity", tc.name)
			}
		}
	}
	if len(ids) != len(cases) || len(store.All("t")) != len(cases) {
		t.Fatalf("%d ids, %d artifacts for %d distinct values", len(ids), len(store.All("t")), len(cases))
	}
}

var receiptIDRE = regexp.MustCompile(`Token Terminator artifact a_([0-9a-f]{32}) `)

// artifactByID returns tenant's stored artifact with the public id (hex
// part), read back through Get.
func artifactByID(t *testing.T, store *compilertest.MemStore, tenant, id string) artifact.Artifact {
	t.Helper()
	for _, a := range store.All(tenant) {
		if artifact.ID(a.Digest) == "a_"+id {
			got, ok, err := store.Get(t.Context(), tenant, a.Digest)
			if !ok || err != nil {
				t.Fatalf("a_%s: Get = %v, %v", id, ok, err)
			}
			return got
		}
	}
	t.Fatalf("a_%s not stored", id)
	return artifact.Artifact{}
}
