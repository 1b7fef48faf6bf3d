package recovery

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/seal"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/badgervault"
)

// Over a sealed vault the API serves an artifact to the keys it was sealed
// under, and answers vault_error (never content) when the record does not
// open with the caller's keys.
func TestAPIWithSealedVault(t *testing.T) {
	store, err := badgervault.Open(badgervault.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	keys := func(secret string) *seal.Keys {
		k, err := seal.Derive([]byte("gateway tenant key for the tests"), secret)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	alice := keys("sk-alice")
	text := strings.Repeat("sealed line with a Needle\n", 2000)
	raw, _ := json.Marshal(text)
	a := artifact.Artifact{Digest: alice.ID(artifact.DigestOf(text, raw)), Text: text, Raw: raw, Tool: "read_file", Chars: utf8.RuneCountInString(text)}
	if err := store.Persist(seal.NewContext(context.Background(), alice), artifact.Scope{Tenant: "t"}, []artifact.Artifact{a}); err != nil {
		t.Fatal(err)
	}
	api := NewAPI(store, func(*http.Request) (string, bool) { return "t", true }, Config{})
	get := func(k *seal.Keys) (int, string) {
		req := httptest.NewRequest("GET", "/token-terminator/artifacts/"+artifact.ID(a.Digest), nil)
		req = req.WithContext(seal.NewContext(req.Context(), k))
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if code, body := get(alice); code != 200 || !strings.Contains(body, "sealed line with a Needle") {
		t.Fatalf("the sealing keys: %d %.200s", code, body)
	}
	for name, k := range map[string]*seal.Keys{"other keys": keys("sk-mallory"), "no keys": nil} {
		code, body := get(k)
		if code != 500 || !strings.Contains(body, `"vault_error"`) || strings.Contains(body, "Needle") {
			t.Fatalf("%s: %d %.200s", name, code, body)
		}
	}
}
