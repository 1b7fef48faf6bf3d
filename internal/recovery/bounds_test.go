package recovery

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// countingArtifacts counts the vault reads of the tool.
type countingArtifacts struct {
	Artifacts
	reads int
}

func (c *countingArtifacts) Get(ctx context.Context, tenant string, d artifact.Digest) (artifact.Artifact, bool, error) {
	c.reads++
	return c.Artifacts.Get(ctx, tenant, d)
}

func (c *countingArtifacts) Resolve(ctx context.Context, tenant, id string) (artifact.Digest, bool, error) {
	c.reads++
	return c.Artifacts.Resolve(ctx, tenant, id)
}

func (c *countingArtifacts) Search(ctx context.Context, tenant, query string, limit int) ([]artifact.Artifact, error) {
	c.reads++
	return c.Artifacts.Search(ctx, tenant, query, limit)
}

// The calls of one round past MaxCalls are not executed: they read nothing
// and are answered too_many_calls, each, so the model has an answer for
// every call it made.
func TestRunCapsCallsPerRound(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct{ max, calls, run int }{
		{0, 20, DefaultMaxCalls}, // the default
		{3, 5, 3},
		{3, 3, 3},
	} {
		arts := &countingArtifacts{Artifacts: f.mem}
		calls := make([]Call, tc.calls)
		for i := range calls {
			calls[i] = Call{ID: fmt.Sprint("c", i), Args: []byte(`{"action":"artifact_search","query":"needle"}`)}
		}
		Run(context.Background(), Config{MaxCalls: tc.max}, arts, "tenant:Bearer k1", calls)
		if arts.reads != tc.run {
			t.Fatalf("max %d, %d calls: %d vault reads, want %d", tc.max, tc.calls, arts.reads, tc.run)
		}
		for i, c := range calls {
			var v struct {
				Error *Error `json:"error"`
			}
			if err := json.Unmarshal(c.Result, &v); err != nil {
				t.Fatal(err)
			}
			if refused := v.Error != nil && v.Error.Type == "too_many_calls"; refused != (i >= tc.run) {
				t.Fatalf("max %d: call %d answered %s", tc.max, i, c.Result)
			}
		}
	}
}

// A query longer than MaxQueryChars is refused with 400 by the API and the
// tool alike, before the vault is read; one at the bound is answered.
func TestSearchQueryCap(t *testing.T) {
	f := newFixture(t)
	arts := &countingArtifacts{Artifacts: f.mem}
	api := NewAPI(arts, tenantFromAuth, Config{})
	for _, tc := range []struct {
		q      string
		status int
	}{
		{strings.Repeat("n", 16<<10), http.StatusBadRequest},
		{strings.Repeat("ü", MaxQueryChars+1), http.StatusBadRequest},
		{strings.Repeat("ü", MaxQueryChars), http.StatusOK},
	} {
		arts.reads = 0
		f.api = api
		status, body := f.get(t, http.MethodGet, "/token-terminator/artifacts?q="+url.QueryEscape(tc.q), "Bearer k1")
		if status != tc.status {
			t.Fatalf("a %d-character query: %d %s", len([]rune(tc.q)), status, body)
		}
		if tc.status == http.StatusBadRequest {
			if arts.reads != 0 || !strings.Contains(string(body), "invalid_request") {
				t.Fatalf("refused query: %d vault reads, %s", arts.reads, body)
			}
			args, _ := json.Marshal(map[string]string{"action": "artifact_search", "query": tc.q})
			if res := ExecuteWith(context.Background(), Config{}, arts, "tenant:Bearer k1", args); !strings.Contains(string(res), "at most 256 characters") || arts.reads != 0 {
				t.Fatalf("the tool: %s", res)
			}
		}
	}
}
