package caddymodule

import (
	"net/http"
	"testing"
)

// A Gemini request's tenant comes from x-goog-api-key, else ?key=, else
// Authorization (Vertex); the same key finds the same tenant whichever way
// it is sent, and another format's header order is not used.
func TestGeminiTenant(t *testing.T) {
	h := &Handler{}
	h.tenants = tenantHasher([]byte("0123456789abcdef0123456789abcdef"))
	const path = "/v1beta/models/gemini-2.5-pro:generateContent"
	req := func(query string, kv ...string) *http.Request {
		r := newRequest(http.MethodPost, path+query, nil)
		r.Header.Del("Authorization") // newRequest's default credential
		for i := 0; i < len(kv); i += 2 {
			r.Header.Set(kv[i], kv[i+1])
		}
		return r
	}
	header := h.tenant(req("", "X-Goog-Api-Key", "AIza-one"), geminiFormat)
	query := h.tenant(req("?key=AIza-one&alt=sse"), geminiFormat)
	bearer := h.tenant(req("", "Authorization", "Bearer ya29.token"), geminiFormat)
	other := h.tenant(req("?key=AIza-two"), geminiFormat)
	if header == "" || header != query || bearer == "" || bearer == header || other == header {
		t.Fatalf("header %q query %q bearer %q other %q", header, query, bearer, other)
	}
	// The header wins over the query, the query over Authorization.
	if got := h.tenant(req("?key=AIza-two", "X-Goog-Api-Key", "AIza-one", "Authorization", "Bearer x"), geminiFormat); got != header {
		t.Fatal("x-goog-api-key did not decide")
	}
	if got := h.tenant(req("?key=AIza-one", "Authorization", "Bearer ya29.token"), geminiFormat); got != header {
		t.Fatal("?key= did not decide over Authorization")
	}
	if got := h.tenant(req(""), geminiFormat); got != "" {
		t.Fatalf("no credential: tenant %q", got)
	}
	// Other formats never read the query.
	if got := h.tenant(req("?key=AIza-one"), "openai_chat"); got != "" {
		t.Fatalf("chat took ?key=: %q", got)
	}
}
