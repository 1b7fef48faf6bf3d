package caddymodule

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// Helpers for driving a provisioned Handler through ServeHTTP, as Caddy
// does; the runtime's own tests (internal/gateway) drive the gateway.

const chatPath = "/v1/chat/completions"

// seen is what the next handler was given.
type seen struct {
	calls int
	body  []byte
}

func recordNext(s *seen) caddyhttp.Handler {
	return caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		s.calls++
		s.body, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusOK)
		return nil
	})
}

func newRequest(method, path string, body io.Reader) *http.Request {
	r := httptest.NewRequest(method, path, body)
	// Every test request carries a credential unless the test removes it.
	r.Header.Set("Authorization", "Bearer sk-default")
	repl := caddyhttp.NewTestReplacer(r)
	return r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
}

// serve runs one request through h to a recording next handler.
func serve(t *testing.T, h *Handler, r *http.Request) (*httptest.ResponseRecorder, *seen) {
	t.Helper()
	w := httptest.NewRecorder()
	s := &seen{}
	if err := h.ServeHTTP(w, r, recordNext(s)); err != nil {
		t.Fatal(err)
	}
	return w, s
}

// answerStatus is a provider that reads the body and answers code.
func answerStatus(code int) caddyhttp.Handler {
	return caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		_, _ = new(bytes.Buffer).ReadFrom(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, err := w.Write([]byte(`{}`))
		return err
	})
}

// verifyCredential has the provider accept one request of credential
// (Authorization) through h, as a client's first request would be: it
// passes through as unverified_tenant, and the 2xx answer verifies the
// tenant, so the next request of credential is compiled.
func verifyCredential(t testing.TB, h *Handler, credential string) {
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

// largeBody is a chat history of about n bytes whose tool results repeat.
func largeBody(seed, n int) []byte {
	turns := fixtures.Turns(seed*1000, n/60000, 40000)
	turns = append(turns, turns[:len(turns)/2]...)
	return fixtures.ChatBody("gpt-4o", turns, "go on")
}

func serveBody(h *Handler, body []byte) (string, error) {
	r := httptest.NewRequest(http.MethodPost, chatPath, bytes.NewReader(body))
	r.Header.Set("Authorization", "Bearer sk-memory")
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	err := h.ServeHTTP(w, r, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		_, err := io.Copy(io.Discard, r.Body)
		return err
	}))
	return w.Header().Get(HeaderName), err
}

// isOpen reports whether the handler's config has opened its vault.
func isOpen(h *Handler) bool {
	select {
	case <-h.gw.Opened:
		return true
	default:
		return h.gw.Opened == nil
	}
}
