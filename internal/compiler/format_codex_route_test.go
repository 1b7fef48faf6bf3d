package compiler

import (
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// Codex signed in with ChatGPT sends its Responses requests to
// /backend-api/codex/responses: compiled as the Responses API, as
// /v1/responses is; the remote compaction endpoint and other backend paths
// are not candidates.
func TestFormatForCodexLoginRoute(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		want         provider.Format
		ok           bool
	}{
		{"POST", "/backend-api/codex/responses", "openai_responses", true},
		{"POST", "/backend-api/codex/responses/", "openai_responses", true},
		{"POST", "/v1/responses", "openai_responses", true},
		{"GET", "/backend-api/codex/responses", "", false},
		{"POST", "/backend-api/codex/responses/compact", "", false},
		{"POST", "/backend-api/codex/models", "", false},
	} {
		got, ok := FormatFor(tc.method, tc.path)
		if got != tc.want || ok != tc.ok {
			t.Errorf("FormatFor(%s %s) = %q, %v; want %q, %v", tc.method, tc.path, got, ok, tc.want, tc.ok)
		}
	}
}
