package gateway

import (
	"net/http"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// A Gemini request's tenant comes from x-goog-api-key, else ?key=, else
// Authorization (Vertex); the same key finds the same tenant whichever way
// it is sent, and another format's header order is not used.
func TestGeminiTenant(t *testing.T) {
	h := &Gateway{}
	h.Tenants = TenantHasher([]byte("0123456789abcdef0123456789abcdef"))
	const path = "/v1beta/models/gemini-2.5-pro:generateContent"
	req := func(query string, kv ...string) *http.Request {
		r := newRequest(http.MethodPost, path+query, nil)
		r.Header.Del("Authorization") // newRequest's default credential
		for i := 0; i < len(kv); i += 2 {
			r.Header.Set(kv[i], kv[i+1])
		}
		return r
	}
	header := h.tenant(req("", "X-Goog-Api-Key", "AIza-one"), provider.Gemini)
	query := h.tenant(req("?key=AIza-one&alt=sse"), provider.Gemini)
	bearer := h.tenant(req("", "Authorization", "Bearer ya29.token"), provider.Gemini)
	other := h.tenant(req("?key=AIza-two"), provider.Gemini)
	if header == "" || header != query || bearer == "" || bearer == header || other == header {
		t.Fatalf("header %q query %q bearer %q other %q", header, query, bearer, other)
	}
	// The header wins over the query, the query over Authorization.
	if got := h.tenant(req("?key=AIza-two", "X-Goog-Api-Key", "AIza-one", "Authorization", "Bearer x"), provider.Gemini); got != header {
		t.Fatal("x-goog-api-key did not decide")
	}
	if got := h.tenant(req("?key=AIza-one", "Authorization", "Bearer ya29.token"), provider.Gemini); got != header {
		t.Fatal("?key= did not decide over Authorization")
	}
	if got := h.tenant(req(""), provider.Gemini); got != "" {
		t.Fatalf("no credential: tenant %q", got)
	}
	// Other formats never read the query.
	if got := h.tenant(req("?key=AIza-one"), provider.Chat); got != "" {
		t.Fatalf("chat took ?key=: %q", got)
	}
}
