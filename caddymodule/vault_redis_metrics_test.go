//go:build unix

package caddymodule

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/redisvault/redistest"
)

// The vault metrics work on a Redis vault: after a rewrite stored one
// artifact, a scrape reports it (and what was written) from Redis.
func TestRedisVaultMetrics(t *testing.T) {
	srv := redistest.Start(t)
	app, ctx := newApp(t)
	h := &Handler{VaultRaw: json.RawMessage(`{"backend":"redis","url":"` + srv.URL() + `","key_prefix":"metrics:"}`)}
	if err := provisionHandler(t, app, ctx, h); err != nil {
		t.Fatal(err)
	}
	out := fixtures.ToolOutput(5, 9000)
	turn := fixtures.ChatTurn{Tool: "bash", Args: `{"command":"cat a"}`, Output: out}
	body := fixtures.ChatBody("gpt-4o", []fixtures.ChatTurn{turn, turn}, "")
	verifyCredential(t, h, "Bearer sk-default")
	w, seen := serve(t, h, newRequest(http.MethodPost, chatPath, bytes.NewReader(body)))
	if tt := w.Header().Get(HeaderName); !strings.HasPrefix(tt, "accepted") || len(seen.body) >= len(body) {
		t.Fatalf("rewrite not accepted: %q", tt)
	}
	reg := prometheus.NewRegistry()
	if err := registerMetrics(reg, app.shared); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if g := m.GetGauge(); g != nil {
				got[mf.GetName()] = g.GetValue()
			}
			if c := m.GetCounter(); c != nil && len(m.GetLabel()) == 0 {
				got[mf.GetName()] = c.GetValue()
			}
		}
	}
	size := float64(len(out)) // text; raw adds its JSON form
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"token_terminator_vault_artifacts", got["token_terminator_vault_artifacts"] == 1},
		{"token_terminator_vault_artifacts_written_total", got["token_terminator_vault_artifacts_written_total"] == 1},
		{"token_terminator_vault_bytes", got["token_terminator_vault_bytes"] > size},
		{"token_terminator_vault_max_bytes", got["token_terminator_vault_max_bytes"] > 0},
		{"token_terminator_vault_evictions_total", got["token_terminator_vault_evictions_total"] == 0},
	} {
		if !c.ok {
			t.Errorf("%s = %v", c.name, got[c.name])
		}
	}
}
