package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/tokenterminator/caddy-token-terminator/caddymodule"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault/badgervault"
)

// The provider's answer is part of "accepted": a request it rejected
// (429, 5xx) leaves no inline delivery behind, so the next request of the
// conversation still carries the result inline; once a request is answered
// 2xx, the one after it gets the receipt.
func TestProviderRejectionRecordsNoExposure(t *testing.T) {
	up := newUpstream(t)
	up.respond = statusFor(func(n int) int {
		switch n {
		case 0:
			return http.StatusTooManyRequests
		case 1:
			return http.StatusInternalServerError
		}
		return 0
	})
	g := startGateway(t, defaultSnippet, up)
	out := bigOutput("rejected", 9000)
	step1, step2 := agentRun("List.", out)

	if r := g.post(chatPath, step1); r.Status != http.StatusTooManyRequests {
		t.Fatalf("status %d", r.Status)
	}
	// 429 recorded nothing: step 2 goes out as the original (and gets 500).
	r := g.post(chatPath, step2)
	if r.Status != http.StatusInternalServerError || !strings.HasPrefix(r.TT, "passthrough=nothing_to_replace;") {
		t.Fatalf("after a 429: status %d, %q", r.Status, r.TT)
	}
	expectSame(t, step2, up.last(t))
	// 500 recorded nothing either; this one is answered 200 and recorded.
	r = g.post(chatPath, step2)
	if r.Status != http.StatusOK || !strings.HasPrefix(r.TT, "passthrough=nothing_to_replace;") {
		t.Fatalf("after a 500: status %d, %q", r.Status, r.TT)
	}
	// Now the delivery counts: a later step carries the receipt.
	c := newConversation("You are a coding agent. Use tools.", "List.").tool("bash", `{"cmd":"ls -laR"}`, out)
	c.say("I listed the repository.", "Now summarize it.")
	c.say("Summary.", "Thanks.")
	r = g.post(chatPath, c.body())
	expectAccepted(t, r, 1)

	var statuses []float64
	for _, l := range g.logLines() {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["decision"] != nil {
			statuses = append(statuses, m["status"].(float64))
			if m["committed"] != (m["status"].(float64) == 200) {
				t.Errorf("committed %v with status %v", m["committed"], m["status"])
			}
			if _, ok := m["upstream_ms"]; !ok {
				t.Errorf("log line without upstream_ms: %s", l)
			}
		}
	}
	if len(statuses) != 4 || statuses[0] != 429 || statuses[1] != 500 || statuses[2] != 200 {
		t.Fatalf("logged statuses %v", statuses)
	}
}

// A provider that drops the connection mid-stream (after a 200 header) did
// not accept the request: nothing is recorded, the log line says aborted.
func TestUpstreamResetRecordsNoExposure(t *testing.T) {
	up := newUpstream(t)
	up.respond = func(n int, w http.ResponseWriter) bool {
		if n == 0 {
			resetMidStream(w)
			return true
		}
		return false
	}
	g := startGateway(t, defaultSnippet, up)
	out := bigOutput("reset", 9000)
	step1, step2 := agentRun("List.", out)
	if _, err := g.try(http.MethodPost, chatPath, bytes.NewReader(step1), int64(len(step1))); err == nil {
		t.Log("client saw the truncated stream end without an error")
	}
	r := g.post(chatPath, step2)
	if !strings.HasPrefix(r.TT, "passthrough=nothing_to_replace;") {
		t.Fatalf("after a reset: %q (the reset request was counted)", r.TT)
	}
	lines := g.logLines()
	var first map[string]any
	for _, l := range lines {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["decision"] != nil {
			first = m
			break
		}
	}
	if first == nil || first["committed"] != false || first["outcome"] != "aborted" {
		t.Fatalf("log of the reset request: %v", first)
	}
}

// The decision placeholders reach a handler after token_terminator and the
// access log.
func TestPlaceholdersThroughCaddy(t *testing.T) {
	up := newUpstream(t)
	accessLog := filepath.Join(t.TempDir(), "access.log")
	g := startGateway(t, `
	log {
		output file `+accessLog+`
		format json
	}
	log_append tt_decision {http.token_terminator.decision}
	log_append tt_receipts {http.token_terminator.receipts}
	route {
		token_terminator {
			vault_dir $VAULT
		}
		header X-TT-Decision {http.token_terminator.decision}
		header X-TT-Reason {http.token_terminator.reason}
		header X-TT-Bytes "{http.token_terminator.raw_bytes}>{http.token_terminator.sent_bytes}"
		reverse_proxy $UPSTREAM
	}
`, up)
	out := bigOutput("placeholders", 9000)
	step1, step2 := agentRun("List.", out)
	r := g.post(chatPath, step1)
	if r.Header.Get("X-TT-Decision") != "passthrough" || r.Header.Get("X-TT-Reason") != "nothing_to_replace" {
		t.Fatalf("step 1 headers: %v", r.Header)
	}
	r = g.post(chatPath, step2)
	expectAccepted(t, r, 1)
	sent := len(up.last(t).Body)
	if r.Header.Get("X-TT-Decision") != "accepted" || r.Header.Get("X-TT-Reason") != "" {
		t.Fatalf("step 2 headers: %v", r.Header)
	}
	if got, want := r.Header.Get("X-TT-Bytes"), strconv.Itoa(len(step2))+">"+strconv.Itoa(sent); got != want {
		t.Fatalf("X-TT-Bytes %q, want %q", got, want)
	}
	// Caddy writes the access log once the handler returns, which may be
	// after the client has the answer (flushed before the lineage record):
	// wait for the line.
	var data []byte
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		var err error
		if data, err = os.ReadFile(accessLog); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), `"tt_decision":"accepted"`) || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(string(data), `"tt_decision":"accepted"`) || !strings.Contains(string(data), `"tt_receipts":1`) {
		t.Fatalf("access log lacks the placeholders:\n%s", data)
	}
}

// A damaged vault (MANIFEST overwritten with junk) never stops Caddy: it
// starts and serves, candidates pass through with vault_error, the files
// stay as they were, and a reload after the operator restored the vault
// opens it.
func TestDamagedVaultCaddyStarts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vault")
	st, err := badgervault.Open(badgervault.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, "MANIFEST")
	good, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	junk := []byte("junk junk junk junk junk junk junk junk")
	if err := os.WriteFile(manifest, junk, 0o600); err != nil {
		t.Fatal(err)
	}

	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up, dir)
	out := bigOutput("damaged", 9000)
	step1, step2 := agentRun("List.", out)
	for _, b := range [][]byte{step1, step2} {
		r := g.post(chatPath, b)
		if r.Status != http.StatusOK || !strings.HasPrefix(r.TT, "passthrough=vault_error;") {
			t.Fatalf("status %d, %q", r.Status, r.TT)
		}
		expectSame(t, b, up.last(t))
	}
	if data, _ := os.ReadFile(manifest); string(data) != string(junk) {
		t.Fatal("the damaged MANIFEST was touched")
	}
	logs, _ := os.ReadFile(g.LogFile)
	if !strings.Contains(string(logs), `"level":"error"`) || !strings.Contains(string(logs), "vault did not open") {
		t.Fatalf("no error-level log with the cause:\n%s", logs)
	}

	// The operator restores the vault; a reload opens it.
	if err := os.WriteFile(manifest, good, 0o600); err != nil {
		t.Fatal(err)
	}
	g.reload(defaultSnippet, up)
	g.post(chatPath, step1)
	expectAccepted(t, g.post(chatPath, step2), 1)
}

// Two handlers of one config naming one vault directory with two
// capacities: Caddy refuses the config, naming both values.
func TestVaultConflictRefusedByCaddy(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	cfg := gatewayConfig(freePort(t), g.LogFile, `
	route /a/* {
		token_terminator {
			vault_dir $VAULT
			vault_max_bytes 1MiB
		}
		reverse_proxy $UPSTREAM
	}
	route {
		token_terminator {
			vault badger {
				dir $VAULT
				max_bytes 2MiB
			}
		}
		reverse_proxy $UPSTREAM
	}
`, up.addr(), filepath.Join(t.TempDir(), "v"))
	js, err := adaptCaddyfile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = caddy.Load(js, true)
	if err == nil || !strings.Contains(err.Error(), "max_bytes=1048576") || !strings.Contains(err.Error(), "max_bytes=2097152") {
		t.Fatalf("conflicting vault configuration: %v", err)
	}
	// The running config is untouched.
	g.reloaded = true
	if r := g.post("/v1/embeddings", []byte(`{}`)); r.Status != http.StatusOK {
		t.Fatalf("gateway after a refused config: %d", r.Status)
	}
}

// Requests without a credential get no cross-request state, unless the
// operator names their identity with `tenant`.
func TestNoTenant(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	out := bigOutput("anonymous", 9000)
	step1, step2 := agentRun("List.", out)
	for _, b := range [][]byte{step1, step2} {
		r := g.post(chatPath, b, "Authorization:")
		if !strings.HasPrefix(r.TT, "passthrough=no_tenant;") {
			t.Fatalf("%q", r.TT)
		}
		expectSame(t, b, up.last(t))
	}

	g.reload(`
	token_terminator {
		vault_dir $VAULT
		tenant {http.request.header.X-User}
	}
	reverse_proxy $UPSTREAM
`, up)
	g.post(chatPath, step1, "Authorization:", "X-User: alice")
	expectAccepted(t, g.post(chatPath, step2, "Authorization:", "X-User: alice"), 1)
	// Another identity has its own leases: carol never delivered step 1.
	if r := g.post(chatPath, step2, "Authorization:", "X-User: carol"); strings.HasPrefix(r.TT, "accepted") {
		t.Fatalf("carol got alice's lease: %q", r.TT)
	}
}

// The vault block selects the badger module; with tenant_key two gateways
// on two vaults compute the same tenant for one credential (without it,
// each vault's own key gives its own).
func TestVaultBlockAndTenantKey(t *testing.T) {
	t.Setenv("TT_IT_TENANT_KEY", "integration-fleet-key-0123456789")
	up := newUpstream(t)
	tenantOf := func(snippet string) string {
		t.Helper()
		g := startGateway(t, snippet, up)
		g.post(chatPath, []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`), "Authorization: Bearer sk-fleet")
		if _, err := os.Stat(filepath.Join(g.VaultDir, "MANIFEST")); err != nil {
			t.Fatalf("no badger vault in %s: %v", g.VaultDir, err)
		}
		lines := g.logLines()
		var m map[string]any
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil {
			t.Fatal(err)
		}
		if err := stopCaddy(); err != nil {
			t.Fatal(err)
		}
		return m["tenant"].(string)
	}
	withKey := `
	token_terminator {
		vault badger {
			dir $VAULT
			max_bytes 64MiB
		}
		tenant_key {env.TT_IT_TENANT_KEY}
	}
	reverse_proxy $UPSTREAM
`
	withoutKey := `
	token_terminator {
		vault badger {
			dir $VAULT
		}
	}
	reverse_proxy $UPSTREAM
`
	a, b := tenantOf(withKey), tenantOf(withKey)
	if a == "" || a != b {
		t.Fatalf("tenant_key: tenants %q and %q", a, b)
	}
	if c, d := tenantOf(withoutKey), tenantOf(withoutKey); c == d {
		t.Fatalf("two vaults' own keys gave one tenant %q", c)
	}
}

// A full vault is reported as vault_full (the shared artifact.ErrFull), and
// the original goes out.
func TestVaultFullReported(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, `
	token_terminator {
		vault_dir $VAULT
		vault_max_bytes 1KB
	}
	reverse_proxy $UPSTREAM
`, up)
	out := bigOutput("full", 10000)
	body := newConversation("sys", "check twice").
		tool("bash", `{"cmd":"cat a"}`, out).
		tool("bash", `{"cmd":"cat a"}`, out).body()
	r := g.post(chatPath, body)
	if !strings.HasPrefix(r.TT, "passthrough=vault_full;") {
		t.Fatalf("%q", r.TT)
	}
	expectSame(t, body, up.last(t))
}

// A WebSocket upgrade of /v1/responses (Codex) passes through Caddy
// uncompiled and unbuffered, both ways, and is logged with websocket=true.
func TestWebSocketUpgradePassesThrough(t *testing.T) {
	up := newUpstream(t)
	ws := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want an upgrade", http.StatusBadRequest)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		// Echo one line back at once.
		line, err := brw.ReadString('\n')
		if err != nil {
			return
		}
		brw.WriteString("echo " + line)
		brw.Flush()
	}))
	t.Cleanup(ws.Close)
	g := startGateway(t, `
	token_terminator {
		vault_dir $VAULT
	}
	reverse_proxy `+strings.TrimPrefix(ws.URL, "http://")+`
`, up)

	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(g.URL, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "GET /v1/responses HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer sk-ws\r\n\r\n", strings.TrimPrefix(g.URL, "http://"))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get(caddymodule.HeaderName) != "" {
		t.Fatalf("status %d, %s %q", resp.StatusCode, caddymodule.HeaderName, resp.Header.Get(caddymodule.HeaderName))
	}
	fmt.Fprintf(conn, "hello\n")
	echo, err := br.ReadString('\n')
	if err != nil || echo != "echo hello\n" {
		t.Fatalf("echo %q, %v", echo, err)
	}
	var found bool
	for _, l := range g.logLines() {
		if strings.Contains(l, `"websocket":true`) && strings.Contains(l, `"format":"openai_responses"`) {
			found = true
		}
	}
	if !found {
		t.Fatalf("no upgrade log line:\n%s", strings.Join(g.logLines(), "\n"))
	}
}
