package gateway

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/badgervault"
)

// verifyCredential has the provider accept one request of credential
// (Authorization) through h, as a client's first request would be: it
// passes through as unverified_tenant, and the 2xx answer verifies the
// tenant, so the next request of credential is compiled.
func verifyCredential(t testing.TB, h *Gateway, credential string) {
	t.Helper()
	r := newRequest(http.MethodPost, chatPath, strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`))
	r.Header.Set("Authorization", credential)
	w := httptest.NewRecorder()
	if err := h.ServeHTTP(w, r, answerStatus(http.StatusOK)); err != nil {
		t.Fatal(err)
	}
	if tt := w.Header().Get(HeaderName); !strings.HasPrefix(tt, "passthrough=unverified_tenant;") {
		t.Fatalf("first request of a new credential: %q, want passthrough=unverified_tenant", tt)
	}
}

// answerStatus is a provider that reads the body and answers code.
func answerStatus(code int) Next {
	return Next(func(w http.ResponseWriter, r *http.Request) error {
		_, _ = new(bytes.Buffer).ReadFrom(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, err := w.Write([]byte(`{}`))
		return err
	})
}

// gatedHandler is a gateway wired as caddymodule wires it on a fresh
// Badger vault: the verified set (max_new_tenants_per_minute 60, or
// maxNew), the ledger and the recovery tool.
func gatedHandler(t *testing.T, maxNew int) (*Gateway, vault.Backend) {
	t.Helper()
	h, store := realGatewayStore(t, nil)
	if maxNew == 0 {
		maxNew = 60
	}
	h.Gate = NewTenantGate(store, maxNew, zap.NewNop())
	h.Ledger = NewLedgerWriter(store, vault.LedgerLimits{Retention: 30 * 24 * time.Hour, MaxRecords: 200000, MaxBytes: 64 << 20}, h.Metrics, zap.NewNop())
	t.Cleanup(h.Ledger.Close)
	h.EnableRecovery(RecoveryTool, recovery.Config{}.WithDefaults(), store)
	return h, store
}

func dupBody() []byte {
	turn := fixtures.ChatTurn{Tool: "bash", Args: `{"command":"cat a"}`, Output: fixtures.ToolOutput(7, 9000)}
	return fixtures.ChatBody("gpt-4o", []fixtures.ChatTurn{turn, turn}, "")
}

func send(t *testing.T, h *Gateway, credential string, body []byte, status int) string {
	t.Helper()
	r := newRequest(http.MethodPost, chatPath, bytes.NewReader(body))
	r.Header.Set("Authorization", credential)
	w := httptest.NewRecorder()
	if err := h.ServeHTTP(w, r, answerStatus(status)); err != nil {
		t.Fatal(err)
	}
	return w.Header().Get(HeaderName)
}

// A credential holds vault state only after a 2xx: a provider answering
// 401 leaves it unverified (nothing stored, every request passes
// through); a 2xx verifies it (the next request compiles); a later 401
// revokes it (pass-through again, the artifact API refuses it).
func TestTenantVerification(t *testing.T) {
	h, store := gatedHandler(t, 0)
	body := dupBody()
	for range 3 {
		if tt := send(t, h, "Bearer sk-refused", body, http.StatusUnauthorized); !strings.HasPrefix(tt, "passthrough=unverified_tenant;") {
			t.Fatalf("refused credential: %q", tt)
		}
	}
	refused := h.Tenants("Bearer sk-refused")
	if ok, _ := store.TenantVerified(context.Background(), refused); ok {
		t.Fatal("a credential the provider answered 401 is verified")
	}
	if st := store.(*badgervault.Store).Stats(); st.Artifacts != 0 || st.Lineage != 0 {
		t.Fatalf("unverified requests stored %d artifacts, %d lineage bytes", st.Artifacts, st.Lineage)
	}
	if tt := send(t, h, "Bearer sk-good", body, http.StatusOK); !strings.HasPrefix(tt, "passthrough=unverified_tenant;") {
		t.Fatalf("first request of a new credential: %q", tt)
	}
	if tt := send(t, h, "Bearer sk-good", body, http.StatusOK); !strings.HasPrefix(tt, "accepted;") {
		t.Fatalf("after a 2xx: %q, want accepted", tt)
	}
	good := h.Tenants("Bearer sk-good")
	if ok, _ := store.TenantVerified(context.Background(), good); !ok {
		t.Fatal("a 2xx did not verify the tenant in the vault")
	}
	api := func() int {
		r := newRequest(http.MethodGet, "/token-terminator/artifacts?q=", nil)
		r.Header.Set("Authorization", "Bearer sk-good")
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, r, answerStatus(http.StatusTeapot)); err != nil {
			t.Fatal(err)
		}
		return w.Code
	}
	if c := api(); c != http.StatusOK {
		t.Fatalf("verified tenant's API search: %d", c)
	}
	// The provider refuses the credential now (revoked key).
	if tt := send(t, h, "Bearer sk-good", body, http.StatusForbidden); !strings.HasPrefix(tt, "accepted;") {
		t.Fatalf("request of a verified tenant: %q", tt)
	}
	if ok, _ := store.TenantVerified(context.Background(), good); ok {
		t.Fatal("a 403 did not revoke the tenant")
	}
	if c := api(); c != http.StatusUnauthorized {
		t.Fatalf("revoked tenant's API search: %d, want 401", c)
	}
	if tt := send(t, h, "Bearer sk-good", body, http.StatusOK); !strings.HasPrefix(tt, "passthrough=unverified_tenant;") {
		t.Fatalf("revoked tenant's next request: %q", tt)
	}
}

// Past max_new_tenants_per_minute, unverified tenants pass through as
// tenant_rate and are not verified by their 2xx; verified ones compile.
func TestNewTenantRate(t *testing.T) {
	// The vault counts new tenants by its own clock's minute: start well
	// inside one.
	if s := time.Now().Second(); s > 50 {
		time.Sleep(time.Duration(61-s) * time.Second)
	}
	h, store := gatedHandler(t, 2)
	minute := time.Now().Truncate(time.Minute)
	h.Gate.now = func() time.Time { return minute.Add(10 * time.Second) }
	body := dupBody()
	for _, c := range []string{"Bearer a", "Bearer b"} {
		verifyCredential(t, h, c)
	}
	// The third new tenant's 2xx is refused by the cap (vault clock: now).
	send(t, h, "Bearer c", body, http.StatusOK)
	if tt := send(t, h, "Bearer d", body, http.StatusOK); !strings.HasPrefix(tt, "passthrough=tenant_rate;") {
		t.Fatalf("a new tenant past the cap: %q", tt)
	}
	for _, c := range []string{"Bearer c", "Bearer d"} {
		if ok, _ := store.TenantVerified(context.Background(), h.Tenants(c)); ok {
			t.Fatalf("%s verified past the cap", c)
		}
	}
	if tt := send(t, h, "Bearer a", body, http.StatusOK); !strings.HasPrefix(tt, "accepted;") {
		t.Fatalf("a verified tenant at the cap: %q", tt)
	}
	// The next minute admits new tenants again.
	h.Gate.now = func() time.Time { return minute.Add(70 * time.Second) }
	if tt := send(t, h, "Bearer d", body, http.StatusOK); !strings.HasPrefix(tt, "passthrough=unverified_tenant;") {
		t.Fatalf("next minute: %q", tt)
	}
}

// Only verified tenants' requests reach the ledger, and its identifiers
// are keyed: the conversation id is 128 bits of a keyed hash (the old
// construction, an unkeyed hash over the printed tenant, is gone).
func TestLedgerOnlyVerifiedKeyedIDs(t *testing.T) {
	h, store := gatedHandler(t, 0)
	body := dupBody()
	send(t, h, "Bearer sk-new", body, http.StatusOK) // unverified: verifies, no record
	r := newRequest(http.MethodPost, chatPath, bytes.NewReader(body))
	r.Header.Del("Authorization")
	serve(t, h, r) // no tenant: no record
	if tt := send(t, h, "Bearer sk-new", body, http.StatusOK); !strings.HasPrefix(tt, "accepted;") {
		t.Fatalf("verified: %q", tt)
	}
	h.Ledger.Flush(context.Background())
	recs, err := store.(vault.Ledger).ReadLedger(context.Background(), vault.LedgerQuery{})
	if err != nil || len(recs) != 1 {
		t.Fatalf("%d ledger records, want only the verified tenant's one (err %v)", len(recs), err)
	}
	rec := recs[0]
	if rec.Tenant != h.Tenants("Bearer sk-new") || rec.Reason != "" {
		t.Fatalf("record %+v", rec)
	}
	c := rec.Conversation
	if len(c) != 2+32 || !strings.HasPrefix(c, "c_") || strings.Trim(c[2:], "0123456789abcdef") != "" {
		t.Fatalf("conversation id %q: want c_ and 32 hex digits", c)
	}
	// The same opening under another tenant key is another id.
	other := &Gateway{}
	other.Tenants = TenantHasher([]byte("another tenant key, 32 bytes ok"))
	var opening artifact.Digest
	opening[0] = 1
	if a, b := h.conversationID(rec.Tenant, opening), other.conversationID(rec.Tenant, opening); a == b || a == "" {
		t.Fatalf("conversation ids %q and %q do not depend on the key", a, b)
	}
}

// The artifact API finds the tenant the request path finds: the provider's
// header order per format on the request path, and on the API (which has
// no format) a request whose credential headers disagree has no tenant.
func TestCredentialHeadersAgree(t *testing.T) {
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	for _, c := range []struct {
		h                    http.Header
		chat, anthropic, api string
	}{
		{hdr("Authorization", "Bearer a"), "Bearer a", "Bearer a", "Bearer a"},
		{hdr("X-Api-Key", "k"), "k", "k", "k"},
		{hdr("Api-Key", "z"), "z", "", "z"},
		{hdr("X-Api-Key", "k", "Authorization", "Bearer a"), "Bearer a", "k", ""},
		{hdr("X-Api-Key", "same", "Authorization", "same"), "same", "same", "same"},
		{hdr(), "", "", ""},
	} {
		if got := credential(c.h, "openai_chat"); got != c.chat {
			t.Errorf("%v chat: %q, want %q", c.h, got, c.chat)
		}
		if got := credential(c.h, "anthropic_messages"); got != c.anthropic {
			t.Errorf("%v anthropic: %q, want %q", c.h, got, c.anthropic)
		}
		api := credential(c.h, "")
		if api != c.api {
			t.Errorf("%v api: %q, want %q", c.h, api, c.api)
		}
		// Whatever the API finds, every format finds too.
		if api != "" && (credential(c.h, "openai_chat") != api || credential(c.h, "anthropic_messages") != api && credential(c.h, "anthropic_messages") != "") {
			t.Errorf("%v: the API's credential %q disagrees with a format's", c.h, api)
		}
	}
}

// A configured identity decides the tenant: the credential never
// overrides it, and without the identity there is no tenant.
func TestConfiguredIdentityDecides(t *testing.T) {
	h := &Gateway{Config: Config{Tenant: "{http.request.header.X-User}"}}
	h.Tenants = TenantHasher([]byte("0123456789abcdef0123456789abcdef"))
	req := func(user, cred string) *http.Request {
		r := newRequest(http.MethodPost, chatPath, nil)
		r.Header.Set("Authorization", cred)
		if user != "" {
			r.Header.Set("X-User", user)
		}
		return r
	}
	a, b := h.tenant(req("alice", "Bearer shared"), "openai_chat"), h.tenant(req("bob", "Bearer shared"), "openai_chat")
	if a == "" || a == b {
		t.Fatalf("alice %q, bob %q with a shared key", a, b)
	}
	if a2 := h.tenant(req("alice", "Bearer other"), "anthropic_messages"); a2 != a {
		t.Fatal("the credential changed a configured identity's tenant")
	}
	if api := h.tenant(req("alice", "Bearer other"), ""); api != a {
		t.Fatal("the API found another tenant than the request path")
	}
	if n := h.tenant(req("", "Bearer shared"), "openai_chat"); n != "" {
		t.Fatalf("no identity but a credential: tenant %q, want none", n)
	}
}
