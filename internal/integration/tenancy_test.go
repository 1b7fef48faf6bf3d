package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery/recoverytest"
)

// Least privilege for the model: conversation 2 of the same key, whose
// provider answers with recovery calls for conversation 1's secret (a
// search by its text, an empty search, a get by its id), reaches none of
// it: the get answers exactly as an unknown id, the searches list only
// conversation 2's own artifacts, and no upstream request of conversation
// 2 carries conversation 1's content.
func TestRecoveryToolStaysInItsConversation(t *testing.T) {
	const secret = "PROD_DB_PASSWORD=correct-horse-battery-staple"
	up := newUpstream(t)
	var model recoverytest.Model
	up.respond = func(n int, w http.ResponseWriter) bool {
		rec := up.all()[n]
		format, _ := compiler.FormatFor(http.MethodPost, rec.Path)
		turn := recoverytest.Text("plain answer", provider.Usage{Input: 500, Output: 5, Known: true})
		// Conversation 2, once it carries a receipt (and the tool), is
		// answered by a model that an injection talked into fishing.
		if bytes.Contains(rec.Body, []byte("Summarise the release notes.")) && receiptIDRE.Match(rec.Body) {
			m := model
			m.Format = format
			t2, err := m.Answer(rec.Body)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprint(w, err.Error())
				return true
			}
			turn = t2
		}
		w.Write(turn.Body(format, n))
		return true
	}
	g := startGateway(t, `
	token_terminator {
		vault_dir $VAULT
		max_recovery_rounds 3
	}
	reverse_proxy $UPSTREAM
`, up)
	const path, key = "/v1/chat/completions", "Authorization: Bearer sk-shared-team-key"
	// Conversation 1: its tool output (with the secret) is vaulted by the
	// lease of its second request.
	c1 := fixtures.Turns(7100, 2, 9000)
	c1[0].Output = secret + "\n" + c1[0].Output
	for i := 1; i <= 2; i++ {
		logged := requestLines(g)
		if r := g.post(path, fixtures.ChatBody("gpt-4o", c1[:i], ""), key); r.Status != 200 {
			t.Fatalf("conversation 1 step %d: %d %s", i, r.Status, r.Body)
		}
		waitLogged(t, g, logged+1)
	}
	id1 := firstReceiptID(t, up.last(t).Body)
	if r := g.do(http.MethodGet, "/token-terminator/artifacts/"+id1, nil, 0, key); r.Status != 200 || !bytes.Contains(r.Body, []byte(secret)) {
		t.Fatalf("conversation 1's artifact is not in the vault (%d): the test proves nothing", r.Status)
	}
	// Conversation 2: same key, another opening.
	conv2 := func(turns []fixtures.ChatTurn) []byte {
		return bytes.Replace(fixtures.ChatBody("gpt-4o", turns, ""), []byte("Fix the failing test."), []byte("Summarise the release notes."), 1)
	}
	c2 := fixtures.Turns(7200, 2, 9000)
	model = recoverytest.Model{ID: id1, Rounds: 3, Args: []string{
		`{"action":"artifact_search","query":"PROD_DB_PASSWORD"}`,
		`{"action":"artifact_search","query":""}`,
		`{"action":"artifact_get","artifact_id":"` + id1 + `"}`,
	}}
	logged := requestLines(g)
	if r := g.post(path, conv2(c2[:1]), key); r.Status != 200 {
		t.Fatalf("conversation 2 step 1: %d", r.Status)
	}
	waitLogged(t, g, logged+1)
	n := up.count()
	r := g.post(path, conv2(c2[:2]), key)
	if r.Status != 200 || !strings.Contains(r.TT, "recovery_rounds=3") {
		t.Fatalf("conversation 2 step 2: %d %q %.300s", r.Status, r.TT, r.Body)
	}
	reqs := up.all()[n:]
	if len(reqs) != 4 {
		t.Fatalf("upstream got %d requests for step 2, want the request and 3 follow-ups", len(reqs))
	}
	id2 := firstReceiptID(t, reqs[0].Body)
	for i, rq := range reqs {
		if bytes.Contains(rq.Body, []byte(secret)) {
			t.Fatalf("upstream request %d of conversation 2 carries conversation 1's secret", i)
		}
	}
	if bytes.Contains(r.Body, []byte(secret)) {
		t.Fatal("the client's answer carries conversation 1's secret")
	}
	res := recoverytest.OwnResults(provider.Chat, reqs[3].Body)
	if len(res) != 3 {
		t.Fatalf("%d tool results, want 3", len(res))
	}
	var byText, all recovery.Hits
	if json.Unmarshal([]byte(res[0]), &byText) != nil || len(byText.Results) != 0 {
		t.Fatalf("a search for conversation 1's text found: %s", res[0])
	}
	if json.Unmarshal([]byte(res[1]), &all) != nil || len(all.Results) != 1 || all.Results[0].ArtifactID != id2 {
		t.Fatalf("an empty search lists more than conversation 2's own artifact %s: %s", id2, res[1])
	}
	unknown := g.do(http.MethodGet, "/token-terminator/artifacts/a_00000000000000000000000000000000", nil, 0, key)
	if res[2] != string(unknown.Body) {
		t.Fatalf("get of conversation 1's id answered %s, want the unknown id's answer %s", res[2], unknown.Body)
	}
	// The operator API stays tenant-wide: the key's own caller reads it.
	if r := g.do(http.MethodGet, "/token-terminator/artifacts?q=PROD_DB_PASSWORD", nil, 0, key); !bytes.Contains(r.Body, []byte(id1)) {
		t.Fatalf("the artifact API no longer finds the tenant's artifact: %s", r.Body)
	}
}

// A credential the provider answers 401 stores nothing: its requests pass
// through untouched (passthrough=unverified_tenant), however many
// duplicates they carry, and the artifact API refuses it.
func TestRefusedCredentialStoresNothing(t *testing.T) {
	up := newUpstream(t)
	up.respond = statusFor(func(int) int { return http.StatusUnauthorized })
	g := startGateway(t, defaultSnippet, up)
	g.noVerify = true
	turns := fixtures.Turns(7300, 2, 9000)
	turns = append(turns, turns...) // every result twice: a compile would receipt them
	body := fixtures.ChatBody("gpt-4o", turns, "")
	for i := range 3 {
		key := fmt.Sprintf("Authorization: Bearer sk-fake-%d", i)
		for range 2 {
			r := g.post("/v1/chat/completions", body, key)
			if r.Status != http.StatusUnauthorized || !strings.HasPrefix(r.TT, "passthrough=unverified_tenant;") {
				t.Fatalf("fake key %d: %d %q", i, r.Status, r.TT)
			}
			expectSame(t, body, up.last(t))
		}
		for _, target := range []string{"/token-terminator/artifacts?q=", "/token-terminator/artifacts/a_" + artifactID(turns[0].Output)} {
			if r := g.do(http.MethodGet, target, nil, 0, key); r.Status != http.StatusUnauthorized {
				t.Fatalf("fake key %d reads %s: %d %s", i, target, r.Status, r.Body)
			}
		}
	}
	for _, l := range g.logLines() {
		if strings.Contains(l, `"msg":"request"`) && !strings.Contains(l, `"receipts":0`) {
			t.Fatalf("a refused credential's request was compiled: %s", l)
		}
	}
}

// Ten fake keys, answered 401, cannot fill a small vault: a verified
// tenant still compiles (on the old code each fake key stored its
// artifacts before the provider answered, and the real key got
// passthrough=vault_full for the retention window).
func TestFakeKeysCannotFillTheVault(t *testing.T) {
	const real = "Bearer sk-real-customer"
	up := newUpstream(t)
	up.respond = func(n int, w http.ResponseWriter) bool {
		if up.all()[n].Header.Get("Authorization") == real {
			return false
		}
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"type":"authentication_error"}}`)
		return true
	}
	g := startGateway(t, `
	token_terminator {
		vault_dir $VAULT
		vault_max_bytes 2MiB
	}
	reverse_proxy $UPSTREAM
`, up)
	g.noVerify = true
	var fakes []string
	for i := range 10 {
		a, b := fixtures.ToolOutput(7400+2*i, 100000), fixtures.ToolOutput(7401+2*i, 100000)
		turns := []fixtures.ChatTurn{{Tool: "bash", Args: `{"c":"a"}`, Output: a}, {Tool: "bash", Args: `{"c":"b"}`, Output: b}}
		body := fixtures.ChatBody("gpt-4o", append(turns, turns...), "")
		r := g.post("/v1/chat/completions", body, fmt.Sprintf("Authorization: Bearer sk-fake-%d", i))
		if r.Status != http.StatusUnauthorized {
			t.Fatalf("fake key %d: %d", i, r.Status)
		}
		fakes = append(fakes, r.TT)
	}
	g.verify("/v1/chat/completions", "Authorization: "+real)
	c := fixtures.ToolOutput(7499, 100000)
	turns := []fixtures.ChatTurn{{Tool: "bash", Args: `{"c":"c"}`, Output: c}, {Tool: "bash", Args: `{"c":"c"}`, Output: c}}
	r := g.post("/v1/chat/completions", fixtures.ChatBody("gpt-4o", turns, ""), "Authorization: "+real)
	if r.Status != 200 || !strings.HasPrefix(r.TT, "accepted;") {
		t.Fatalf("the verified tenant after ten fake keys: %d %q", r.Status, r.TT)
	}
	for i, tt := range fakes {
		if !strings.HasPrefix(tt, "passthrough=unverified_tenant;") {
			t.Fatalf("fake key %d: %q", i, tt)
		}
	}
}

// With a configured tenant identity, users who all send the same dummy
// key are separate tenants: one user's artifacts are not another's,
// through the API as on the request path; the warning about a
// client-set identity is logged at start.
func TestConfiguredTenantSeparatesUsers(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, `
	token_terminator {
		vault_dir $VAULT
		tenant {http.request.header.X-User}
	}
	reverse_proxy $UPSTREAM
`, up)
	const dummy = "Authorization: Bearer sk-shared-dummy"
	turns := fixtures.Turns(7500, 2, 9000)
	for i := 1; i <= 2; i++ {
		if r := g.post("/v1/chat/completions", fixtures.ChatBody("gpt-4o", turns[:i], ""), dummy, "X-User: alice"); r.Status != 200 {
			t.Fatalf("alice step %d: %d", i, r.Status)
		}
	}
	if r := g.post("/v1/chat/completions", fixtures.ChatBody("gpt-4o", turns[:2], ""), dummy, "X-User: alice"); !strings.Contains(r.TT, "receipts=1") {
		t.Fatalf("alice's conversation vaulted nothing (%q): the test proves nothing", r.TT)
	}
	id := firstReceiptID(t, up.last(t).Body)
	get := func(user, target string) response {
		return g.do(http.MethodGet, target, nil, 0, dummy, "X-User: "+user)
	}
	if r := get("alice", "/token-terminator/artifacts/"+id); r.Status != 200 {
		t.Fatalf("alice reads her artifact: %d", r.Status)
	}
	g.verify("/v1/chat/completions", dummy, "X-User: bob")
	unknown := get("bob", "/token-terminator/artifacts/a_00000000000000000000000000000000")
	if r := get("bob", "/token-terminator/artifacts/"+id); r.Status != 404 || !bytes.Equal(r.Body, unknown.Body) {
		t.Fatalf("bob, with the same key, reads alice's artifact: %d %.200s", r.Status, r.Body)
	}
	if r := get("bob", "/token-terminator/artifacts?q="); r.Status != 200 || bytes.Contains(r.Body, []byte(id)) {
		t.Fatalf("bob's search: %d %s", r.Status, r.Body)
	}
	// On bob's request path alice's lineage is not his either: his first
	// request of the same conversation carries its result inline.
	n := up.count()
	if r := g.post("/v1/chat/completions", fixtures.ChatBody("gpt-4o", turns[:2], ""), dummy, "X-User: bob"); strings.Contains(r.TT, "receipts=1") || bytes.Contains(up.all()[n].Body, []byte(id)) {
		t.Fatalf("bob's request was compiled with alice's lineage: %q", r.TT)
	}
	if !logHas(g, "the tenant identity is taken from the request as the client sent it") {
		t.Fatal("no warning about a client-set tenant identity")
	}
}
