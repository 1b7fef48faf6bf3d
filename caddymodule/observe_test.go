package caddymodule

import (
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenterminator/caddy-token-terminator/internal/gateway"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// TestSummarize checks the stats arithmetic against hand-computed sums.
func TestSummarize(t *testing.T) {
	day1 := time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC).UnixMilli()
	day2 := time.Date(2026, 12, 1, 0, 1, 0, 0, time.UTC).UnixMilli()
	recs := []vault.LedgerRecord{
		{Time: day1, Tenant: "ta", TenantLabel: "acme", Conversation: "c1", Model: "gpt-4o", Decision: "accepted",
			RawBytes: 1000, SentBytes: 300, RawTokens: 250, SentTokens: 80, Receipts: 2, Folded: 1, CostRaw: 250, CostSent: 90,
			CostHorizonRaw: 900, CostHorizonSent: 400, Usage: &vault.LedgerUsage{Uncached: 40, CacheRead: 60, Cost: 70}},
		{Time: day2, Tenant: "ta", Conversation: "c1", Model: "gpt-4o", Decision: "passthrough", Reason: "not_smaller",
			RawBytes: 500, SentBytes: 500, RawTokens: 120, SentTokens: 125, CostRaw: 120, CostSent: 120,
			CostHorizonRaw: 300, CostHorizonSent: 300},
		// An older record (no horizon figures) with usage but no expected cost.
		{Time: day2, Tenant: "tb", Conversation: "c2", Model: "claude-sonnet", Decision: "shadow",
			RawBytes: 800, SentBytes: 100, Receipts: 4, Usage: &vault.LedgerUsage{Uncached: 5, CacheRead: 100, CacheWrite: 20, Cost: 40}},
		// Its usage sums a recovery round: billed, but not set against
		// the one request's expected cost.
		{Time: day2, Tenant: "tb", Conversation: "c3", Model: "claude-sonnet", Decision: "accepted",
			RawBytes: 2000, SentBytes: 200, Receipts: 1, CostRaw: 0.5, CostSent: 0.5,
			Usage: &vault.LedgerUsage{Uncached: 1, Cost: 1, RecoveryRounds: 1}},
	}
	st := summarize(recs)
	want := savings{Requests: 4, Accepted: 2, RawBytes: 4300, SentBytes: 300 + 500 + 800 + 200, RawTokens: 370, SentTokens: 80 + 120,
		Receipts: 3, Folded: 1, CostRaw: 370.5, CostSent: 210.5, CostHorizonRaw: 1200, CostHorizonSent: 700,
		UsageRequests: 3, UsageUncached: 46, UsageCacheRead: 160, UsageCacheWrite: 20, CostActual: 111,
		JudgedRequests: 1, CostActualJudged: 70, CostExpectedJudged: 90}
	want.SavedBytes, want.SavedTok, want.CostSaved = want.RawBytes-want.SentBytes, want.RawTokens-want.SentTokens, want.CostRaw-want.CostSent
	want.CostHorizonSaved = 500
	if st.Totals != want {
		t.Fatalf("totals\n got %+v\nwant %+v", st.Totals, want)
	}
	if st.Decisions["accepted"] != 2 || st.Decisions["shadow"] != 1 || st.Reasons["not_smaller"] != 1 {
		t.Fatalf("decisions %v reasons %v", st.Decisions, st.Reasons)
	}
	if len(st.Days) != 2 || st.Days[0].Day != "2026-11-30" || st.Days[0].SavedBytes != 700 || st.Days[1].SavedBytes != 1800 {
		t.Fatalf("days %+v", st.Days)
	}
	if len(st.Tenants) != 2 || st.Tenants[0].Tenant != "tb" || st.Tenants[0].SavedBytes != 1800 || st.Tenants[1].Label != "acme" {
		t.Fatalf("tenants %+v", st.Tenants)
	}
	if ta, tb := st.Tenants[1], st.Tenants[0]; ta.CostHorizonSaved != 500 || ta.CostActual != 70 || ta.CostExpectedJudged != 90 ||
		tb.CostHorizonRaw != 0 || tb.CostActual != 41 || tb.JudgedRequests != 0 || tb.UsageCacheWrite != 20 {
		t.Fatalf("tenant cost figures %+v / %+v", ta, tb)
	}
	if len(st.Models) != 2 || st.Models[0].Model != "claude-sonnet" || st.Models[1].SavedTok != 170 {
		t.Fatalf("models %+v", st.Models)
	}
	if c := st.Conversations; len(c) != 3 || c[0].Conversation != "c3" || c[1].Conversation != "c1" || c[1].Requests != 2 || c[2].SavedBytes != 0 {
		t.Fatalf("conversations %+v", c)
	}
}

func TestObserveConfig(t *testing.T) {
	tests := []struct {
		caddyfile string
		wantErr   string // "" = valid
	}{
		{"bypass_header X-No-TT", ""},
		{"ledger_retention 720h\nledger_max_records 1000\nledger_max_bytes 8MiB", ""},
		{"tenant_label 0123456789abcdef0123456789abcdef acme\ntenant_label 89efabcd0123456789abcdef01234567 beta", ""},
		{"tenant_label 0123abcd acme", "32 lower-case hex digits"}, // a 32-bit prefix could be ground
		{"tenant_label 0123456789abcdef0123456789abcdef0 acme", "32 lower-case hex digits"},
		{"tenant_label 0123456789abcdef0123456789abcdeZ acme", "32 lower-case hex digits"},
		{"tenant_label 0123456789ABCDEF0123456789abcdef acme", "32 lower-case hex digits"},
		{"tenant_label 0123abcd", "takes a tenant id and a name"},
		{"tenant_label 0123456789abcdef0123456789abcdef a\ntenant_label 0123456789abcdef0123456789abcdef b", "duplicate tenant_label"},
		{"ledger_retention -1h", "ledger_retention"},
		{"ledger_max_records 0", "ledger_max_records"},
		{"bypass_header X:Y", "bypass_header must be a header name"},
	}
	for _, tt := range tests {
		var h Handler
		d := caddyfile.NewTestDispenser("token_terminator {\n" + tt.caddyfile + "\n}")
		err := h.UnmarshalCaddyfile(d)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tt.caddyfile, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%q: error %v, want %q", tt.caddyfile, err, tt.wantErr)
		}
	}
}

// TestRecoveryHooks: the recovery path's counters, through the App and
// through a handler's metrics; nil receivers are no-ops.
func TestRecoveryHooks(t *testing.T) {
	sh := &shared{vaults: caddy.NewUsagePool(), metrics: gateway.NewMetrics()}
	sh.vaultMetrics = &vaultCollector{sh: sh}
	app := &App{shared: sh}
	app.RecoveryRound("anthropic_messages")
	sh.metrics.RecoveryRound("anthropic_messages")
	app.RecoveryRead("artifact_get")
	var nilApp *App
	nilApp.RecoveryRound("x")
	var nilMetrics *gateway.Metrics
	nilMetrics.RecoveryRead("x")
	reg := prometheus.NewRegistry()
	if err := registerMetrics(reg, sh); err != nil {
		t.Fatal(err)
	}
	if v := gathered(t, reg, "token_terminator_recovery_rounds_total", "format", "anthropic_messages"); v != 2 {
		t.Fatalf("rounds %v, want 2", v)
	}
	if v := gathered(t, reg, "token_terminator_recovery_reads_total", "action", "artifact_get"); v != 1 {
		t.Fatalf("reads %v, want 1", v)
	}
}

// gathered is the value of the counter name whose label is value in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
