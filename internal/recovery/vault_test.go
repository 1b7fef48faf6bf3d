package recovery

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/badgervault"
)

var _ Artifacts = (*badgervault.Store)(nil)

// TestAPIWithVault serves the API over the real Badger vault: what the
// compiler persisted is found by id and by search, for its tenant only.
func TestAPIWithVault(t *testing.T) {
	store, err := badgervault.Open(badgervault.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	text := strings.Repeat("ünïcode line with a Needle\n", 2000)
	raw, _ := json.Marshal(text)
	a := artifact.Artifact{Digest: artifact.DigestOf(text, raw), Text: text, Raw: raw, Tool: "read_file", Args: `{"path":"/secret"}`, Chars: utf8.RuneCountInString(text)}
	if err := store.Persist(context.Background(), artifact.Scope{Tenant: "tenant:Bearer k1"}, []artifact.Artifact{a}); err != nil {
		t.Fatal(err)
	}
	api := NewAPI(store, tenantFromAuth, Config{})
	get := func(target, auth string) (int, string) {
		req := httptest.NewRequest("GET", target, nil)
		req.Header.Set("Authorization", auth)
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	id := artifact.ID(a.Digest)
	code, body := get("/token-terminator/artifacts/"+id+"?offset=1&limit=30", "Bearer k1")
	var p Page
	if json.Unmarshal([]byte(body), &p); code != 200 || p.Content != string([]rune(text)[1:31]) || p.TotalChars != a.Chars {
		t.Fatalf("%d %s", code, body)
	}
	code, body = get("/token-terminator/artifacts?q=needle", "Bearer k1")
	if code != 200 || body != `{"results":[{"artifact_id":"`+id+`","tool_name":"read_file","total_chars":`+itoa(a.Chars)+`}]}` {
		t.Fatalf("%d %s", code, body)
	}
	if strings.Contains(body, "secret") {
		t.Fatal("tool arguments are private")
	}
	if code, _ := get("/token-terminator/artifacts/"+id, "Bearer k2"); code != 404 {
		t.Fatalf("another tenant read it: %d", code)
	}
	if _, body := get("/token-terminator/artifacts?q=needle", "Bearer k2"); body != `{"results":[]}` {
		t.Fatalf("another tenant found it: %s", body)
	}
}
