package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/redisvault/redistest"
)

// Encryption at rest through Caddy: a marker planted in a tool result, in
// each format, is in no file of the vault after its artifact was stored;
// the artifact API with the conversation's credential returns it, another
// credential reads nothing.
func TestEncryptedAtRest(t *testing.T) {
	t.Run("badger", func(t *testing.T) {
		up := newUpstream(t)
		g := startGateway(t, `
	token_terminator {
		vault_dir $VAULT
	}
	reverse_proxy $UPSTREAM
`, up)
		plantMarkers(t, g, up)
		err := filepath.WalkDir(g.VaultDir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if bytes.Contains(b, []byte(atRestMarker)) {
				t.Errorf("vault file %s holds the marker", filepath.Base(p))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		up := newUpstream(t)
		g := startGateway(t, fmt.Sprintf(`
	token_terminator {
		vault redis {
			url %s
		}
	}
	reverse_proxy $UPSTREAM
`, srv.URL()), up)
		plantMarkers(t, g, up)
		for _, k := range srv.KeysHolding(t, atRestMarker) {
			t.Errorf("redis key %q holds the marker", k)
		}
	})
}

const atRestMarker = "PLANTED-MARKER-PROD_DB_PASSWORD-7f3a9c"

// plantMarkers sends a two-step conversation in each format whose first
// tool result carries atRestMarker, so the second step vaults it, and
// checks the API serves it to the conversation's key only.
func plantMarkers(t *testing.T, g *gateway, up *upstream) {
	t.Helper()
	const marker = atRestMarker
	cases := []struct {
		path, key string
		seed      int
		body      func([]fixtures.ChatTurn) []byte
	}{
		{"/v1/chat/completions", "Authorization: Bearer sk-chat-key", 7300, func(ts []fixtures.ChatTurn) []byte {
			return fixtures.ChatBody("gpt-4o", ts, "")
		}},
		{"/v1/responses", "Authorization: Bearer sk-responses-key", 7400, func(ts []fixtures.ChatTurn) []byte {
			return fixtures.ResponsesBody("gpt-4o", ts, "", fixtures.ResponsesOptions{})
		}},
		{"/v1/messages", "X-Api-Key: sk-ant-messages-key", 7500, func(ts []fixtures.ChatTurn) []byte {
			return fixtures.AnthropicBody("claude-sonnet-4-5", ts, "", fixtures.AnthropicOptions{})
		}},
	}
	for _, c := range cases {
		turns := fixtures.Turns(c.seed, 2, 9000)
		turns[0].Output = turns[0].Output[:4000] + marker + turns[0].Output[4000:]
		for i := 1; i <= 2; i++ {
			logged := requestLines(g)
			if r := g.post(c.path, c.body(turns[:i]), c.key); r.Status != 200 {
				t.Fatalf("%s step %d: %d %s", c.path, i, r.Status, r.Body)
			}
			waitLogged(t, g, logged+1)
		}
		m := receiptIDRE.FindSubmatch(up.last(t).Body)
		if m == nil {
			t.Fatalf("%s: no receipt went upstream", c.path)
		}
		id := string(m[1])
		if id == "a_"+artifactID(turns[0].Output) {
			t.Fatalf("%s: the receipt names the content hash, not a keyed id", c.path)
		}
		if r := g.do(http.MethodGet, "/token-terminator/artifacts/"+id, nil, 0, c.key); r.Status != 200 || !bytes.Contains(r.Body, []byte(marker)) {
			t.Fatalf("%s: the artifact API with the conversation's key: %d", c.path, r.Status)
		}
		if r := g.do(http.MethodGet, "/token-terminator/artifacts/"+id, nil, 0, "Authorization: Bearer sk-another-key"); r.Status == 200 || bytes.Contains(r.Body, []byte(marker)) {
			t.Fatalf("%s: another key read the artifact: %d", c.path, r.Status)
		}
	}
}

// Keyed ids: the same tool output gets one id in every conversation of one
// credential (receipts stay byte-stable for prompt caches) and unrelated
// ids under two credentials.
func TestKeyedReceiptIDs(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	turns := fixtures.Turns(7600, 2, 9000)
	idOf := func(key, opening string) string {
		t.Helper()
		body := func(n int) []byte {
			return bytes.Replace(fixtures.ChatBody("gpt-4o", turns[:n], ""), []byte("Fix the failing test."), []byte(opening), 1)
		}
		for i := 1; i <= 2; i++ {
			logged := requestLines(g)
			if r := g.post("/v1/chat/completions", body(i), key); r.Status != 200 {
				t.Fatalf("step %d: %d %s", i, r.Status, r.Body)
			}
			waitLogged(t, g, logged+1)
		}
		m := receiptIDRE.FindSubmatch(up.last(t).Body)
		if m == nil {
			t.Fatalf("%s: no receipt went upstream", key)
		}
		return string(m[1])
	}
	a1 := idOf("Authorization: Bearer sk-team-a", "Fix the failing test.")
	a2 := idOf("Authorization: Bearer sk-team-a", "Summarise the release notes.")
	b := idOf("Authorization: Bearer sk-team-b", "Fix the failing test.")
	if a1 != a2 {
		t.Errorf("one credential, one content, two ids: %s, %s", a1, a2)
	}
	if a1 == b {
		t.Errorf("two credentials share an id: %s, %s", a1, b)
	}
	if plain := "a_" + artifactID(turns[0].Output); a1 == plain || b == plain {
		t.Errorf("an id is the content hash %s", plain)
	}
}

// firstReceiptID is the id of body's first receipt: artifact ids are keyed
// under the tenant's key, so tests read them from what went upstream.
func firstReceiptID(t testing.TB, body []byte) string {
	t.Helper()
	m := receiptIDRE.FindSubmatch(body)
	if m == nil {
		t.Fatalf("no receipt in %.300s", body)
	}
	return string(m[1])
}

// vaultID is the id of the tenant's artifact whose text contains part,
// found through the artifact API's search. part must be text: the search
// lower-cases the query as strings.ToLower does, so a byte cut out of a
// multi-byte character reads as U+FFFD and matches nothing the text holds.
func vaultID(t testing.TB, g *gateway, part string, headers ...string) string {
	t.Helper()
	if !utf8.ValidString(part) {
		t.Fatalf("search query %q is not UTF-8 text: cut it at character boundaries (textPart)", part)
	}
	r := g.do(http.MethodGet, "/token-terminator/artifacts?q="+url.QueryEscape(part), nil, 0, headers...)
	var hits recovery.Hits
	if r.Status != 200 || json.Unmarshal(r.Body, &hits) != nil || len(hits.Results) != 1 {
		t.Fatalf("search for the artifact: %d %.300s", r.Status, r.Body)
	}
	return hits.Results[0].ArtifactID
}

// textPart is s[from:to] with both ends moved back to the start of the
// character they fall in, so a fixture's multi-byte characters stay whole.
func textPart(s string, from, to int) string {
	for from > 0 && !utf8.RuneStart(s[from]) {
		from--
	}
	for to < len(s) && !utf8.RuneStart(s[to]) {
		to--
	}
	return s[from:to]
}
