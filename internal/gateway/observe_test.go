package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/badgervault"
)

// observedHandler is a test handler with its metrics (testHandler attaches them).
func observedHandler(t *testing.T, fc *fakeCompiler, mutate func(*Gateway)) *Gateway {
	t.Helper()
	h, _ := testHandler(t, fc, mutate)
	return h
}

// TestBypass: the bypass header forwards the original untouched, is not
// forwarded itself, and is reported as passthrough=bypass.
func TestBypass(t *testing.T) {
	tests := []struct {
		name       string
		header     string // configured bypass_header; "" = default
		sendName   string
		sendValue  string
		wantBypass bool
	}{
		{"default header", "", "Token-Terminator", "bypass", true},
		{"case and spaces", "", "token-terminator", " Bypass ", true},
		{"other value is ignored but removed", "", "Token-Terminator", "please", false},
		{"configured name", "X-TT", "X-Tt", "bypass", true},
		{"default name not bypass when renamed", "X-TT", "Token-Terminator", "bypass", false},
		{"absent", "", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := &fakeCompiler{}
			h := observedHandler(t, fc, func(h *Gateway) {
				if tt.header != "" {
					h.BypassHeader = tt.header
				}
			})
			body := `{"model":"gpt-4o","messages":[]}`
			r := newRequest(http.MethodPost, chatPath, strings.NewReader(body))
			if tt.sendName != "" {
				r.Header.Set(tt.sendName, tt.sendValue)
			}
			var upHeader http.Header
			var upBody []byte
			next := Next(func(w http.ResponseWriter, r *http.Request) error {
				upHeader = r.Header.Clone()
				upBody, _ = io.ReadAll(r.Body)
				w.WriteHeader(http.StatusOK)
				return nil
			})
			w := httptest.NewRecorder()
			if err := h.ServeHTTP(w, r, next); err != nil {
				t.Fatal(err)
			}
			if string(upBody) != body {
				t.Fatalf("upstream got %q", upBody)
			}
			name := tt.header
			if name == "" {
				name = HeaderName // the default bypass header
			}
			if _, ok := upHeader[http.CanonicalHeaderKey(name)]; ok {
				t.Fatalf("bypass header %s forwarded upstream", name)
			}
			got := w.Header().Get(HeaderName)
			if tt.wantBypass {
				if fc.calls.Load() != 0 || !strings.HasPrefix(got, "passthrough=bypass;") {
					t.Fatalf("compiled %d times, header %q; want bypass", fc.calls.Load(), got)
				}
				if v := testutil.ToFloat64(h.Metrics.candidates.WithLabelValues("openai_chat", "passthrough", "bypass", "unknown")); v != 1 {
					t.Fatalf("bypass counted %v times", v)
				}
			} else if fc.calls.Load() != 1 {
				t.Fatalf("compiled %d times, want 1 (header %q)", fc.calls.Load(), got)
			}
		})
	}
}

// TestMetricsAfterSequence drives a known sequence of requests and checks
// every series it touches.
func TestMetricsAfterSequence(t *testing.T) {
	orig := `{"model":"claude-sonnet-4-5-20250929","messages":[` + strings.Repeat(" ", 900) + `]}`
	small := []byte(`{"model":"claude-sonnet-4-5-20250929","messages":[]}`)
	results := []compiler.Result{
		{Decision: compiler.Accepted, Body: small, Format: "openai_chat", Model: "claude-sonnet-4-5-20250929",
			Receipts: 3, Folded: 1, Kinds: compiler.ReceiptKinds{Duplicate: 1, Lease: 1, Compaction: 1},
			Tokens:  compiler.TokenReport{Status: artifact.TokensExact, Raw: 400, Sent: 100},
			CostRaw: 400, CostSent: 150, CostHorizonRaw: 1200, CostHorizonSent: 700,
			Parse: time.Millisecond, Gate: 2 * time.Millisecond, Total: 3 * time.Millisecond},
		{Decision: compiler.Passthrough, Reason: compiler.ReasonNotSmaller, Format: "openai_chat", Model: "gpt-4o-2024-08-06",
			Tokens: compiler.TokenReport{Status: artifact.TokensExact, Raw: 400, Sent: 420}, CostRaw: 400, CostSent: 400,
			CostHorizonRaw: 900, CostHorizonSent: 900, Gate: 20 * time.Millisecond, Total: 30 * time.Millisecond},
		{Decision: compiler.Passthrough, Reason: compiler.ReasonVaultFull, Format: "openai_chat", Model: "gpt-4o"},
	}
	n := 0
	fc := &fakeCompiler{fn: func(ctx context.Context, req compiler.Request) compiler.Result {
		res := results[n]
		n++
		if res.Body == nil {
			res.Body = req.Body
		}
		res.RawBytes, res.SentBytes = len(req.Body), len(res.Body)
		return res
	}}
	// The provider's usage per request (chat: prompt_tokens counts the
	// cached ones too), and who sent it: the first request's credential
	// has a tenant label.
	usages := []string{
		`{"prompt_tokens":400,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":300}}`,
		`{"prompt_tokens":400,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":256}}`,
		`{"prompt_tokens":50,"completion_tokens":9}`,
	}
	h := observedHandler(t, fc, nil)
	h.Tenants = TenantHasher([]byte("0123456789abcdef0123456789abcdef"))
	h.TenantLabels = map[string]string{h.Tenants("Bearer sk-team-a"): "team-a"}
	store, err := badgervault.Open(badgervault.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	h.Ledger = NewLedgerWriter(store, vault.LedgerLimits{Retention: time.Hour, MaxRecords: 100, MaxBytes: 1 << 20}, h.Metrics, zap.NewNop())
	defer h.Ledger.Close()
	for i := range results {
		r := newRequest(http.MethodPost, chatPath, strings.NewReader(orig))
		if i == 0 {
			r.Header.Set("Authorization", "Bearer sk-team-a")
		}
		next := Next(func(w http.ResponseWriter, r *http.Request) error {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, err := io.WriteString(w, `{"id":"x","choices":[],"usage":`+usages[i]+`}`)
			return err
		})
		if err := h.ServeHTTP(httptest.NewRecorder(), r, next); err != nil {
			t.Fatal(err)
		}
	}
	ws := newRequest(http.MethodGet, "/v1/responses", nil)
	h.FormatFor = func(method, path string) (provider.Format, bool) {
		if strings.HasSuffix(path, "/responses") {
			return provider.Responses, method == http.MethodPost
		}
		return provider.Chat, method == http.MethodPost && strings.HasSuffix(path, "/chat/completions")
	}
	ws.Header.Set("Upgrade", "websocket")
	serve(t, h, ws)

	m := h.Metrics
	raw, sent := float64(len(orig)), float64(len(small))
	checks := []struct {
		name string
		got  float64
		want float64
	}{
		{"accepted", testutil.ToFloat64(m.candidates.WithLabelValues("openai_chat", "accepted", "", "claude-sonnet")), 1},
		{"not_smaller", testutil.ToFloat64(m.candidates.WithLabelValues("openai_chat", "passthrough", "not_smaller", "gpt-4o")), 1},
		{"vault_full", testutil.ToFloat64(m.candidates.WithLabelValues("openai_chat", "passthrough", "vault_full", "gpt-4o")), 1},
		{"bytes raw claude", testutil.ToFloat64(m.bytes.WithLabelValues("openai_chat", "claude-sonnet", "raw")), raw},
		{"bytes sent claude", testutil.ToFloat64(m.bytes.WithLabelValues("openai_chat", "claude-sonnet", "sent")), sent},
		{"bytes saved claude", testutil.ToFloat64(m.bytes.WithLabelValues("openai_chat", "claude-sonnet", "saved")), raw - sent},
		{"bytes saved gpt-4o", testutil.ToFloat64(m.bytes.WithLabelValues("openai_chat", "gpt-4o", "saved")), 0},
		{"bytes raw gpt-4o", testutil.ToFloat64(m.bytes.WithLabelValues("openai_chat", "gpt-4o", "raw")), 2 * raw},
		{"tokens saved claude", testutil.ToFloat64(m.tokens.WithLabelValues("openai_chat", "claude-sonnet", "saved")), 300},
		{"tokens sent gpt-4o (the original)", testutil.ToFloat64(m.tokens.WithLabelValues("openai_chat", "gpt-4o", "sent")), 400},
		{"cost raw", testutil.ToFloat64(m.cost.WithLabelValues("openai_chat", "claude-sonnet", "raw")), 400},
		{"cost saved", testutil.ToFloat64(m.cost.WithLabelValues("openai_chat", "claude-sonnet", "saved")), 250},
		{"cost horizon raw", testutil.ToFloat64(m.cost.WithLabelValues("openai_chat", "claude-sonnet", "horizon_raw")), 1200},
		{"cost horizon sent", testutil.ToFloat64(m.cost.WithLabelValues("openai_chat", "claude-sonnet", "horizon_sent")), 700},
		// Priced by the cost model: claude-* on the chat API is the
		// "other" family (cached 0.1), gpt-4o reads its cache at 0.5.
		{"cost actual claude", testutil.ToFloat64(m.cost.WithLabelValues("openai_chat", "claude-sonnet", "actual")), 0.1*300 + 100},
		{"cost actual gpt-4o", testutil.ToFloat64(m.cost.WithLabelValues("openai_chat", "gpt-4o", "actual")), 0.5*256 + 144 + 50},
		{"cost actual judged gpt-4o", testutil.ToFloat64(m.cost.WithLabelValues("openai_chat", "gpt-4o", "actual_judged")), 0.5*256 + 144},
		{"cost expected judged gpt-4o", testutil.ToFloat64(m.cost.WithLabelValues("openai_chat", "gpt-4o", "expected_judged")), 400},
		{"usage uncached gpt-4o", testutil.ToFloat64(m.usageTokens.WithLabelValues("openai_chat", "gpt-4o", "uncached")), 144 + 50},
		{"usage cache read gpt-4o", testutil.ToFloat64(m.usageTokens.WithLabelValues("openai_chat", "gpt-4o", "cache_read")), 256},
		{"usage cache read claude", testutil.ToFloat64(m.usageTokens.WithLabelValues("openai_chat", "claude-sonnet", "cache_read")), 300},
		{"tenant team-a raw", testutil.ToFloat64(m.tenantCost.WithLabelValues("team-a", "raw")), 400},
		{"tenant team-a horizon sent", testutil.ToFloat64(m.tenantCost.WithLabelValues("team-a", "horizon_sent")), 700},
		{"tenant team-a actual", testutil.ToFloat64(m.tenantCost.WithLabelValues("team-a", "actual")), 130},
		{"tenant unlabelled horizon raw", testutil.ToFloat64(m.tenantCost.WithLabelValues("unlabelled", "horizon_raw")), 900},
		{"tenant unlabelled actual", testutil.ToFloat64(m.tenantCost.WithLabelValues("unlabelled", "actual")), 272 + 50},
		{"tenant unlabelled expected judged", testutil.ToFloat64(m.tenantCost.WithLabelValues("unlabelled", "expected_judged")), 400},
		// Both tenants: raw, sent, horizon_raw, horizon_sent, actual,
		// actual_judged, expected_judged.
		{"tenant cost series", float64(testutil.CollectAndCount(m.tenantCost)), 14},
		{"receipts duplicate", testutil.ToFloat64(m.receipts.WithLabelValues("openai_chat", receiptDuplicate)), 1},
		{"receipts lease", testutil.ToFloat64(m.receipts.WithLabelValues("openai_chat", receiptLease)), 1},
		{"receipts compaction", testutil.ToFloat64(m.receipts.WithLabelValues("openai_chat", receiptCompaction)), 1},
		{"receipts folded", testutil.ToFloat64(m.receipts.WithLabelValues("openai_chat", receiptFoldedTurn)), 1},
		{"fail open vault_full", testutil.ToFloat64(m.failOpen.WithLabelValues("vault_full")), 1},
		{"not_smaller is no failure", testutil.ToFloat64(m.failOpen.WithLabelValues("not_smaller")), 0},
		{"vault write failures", testutil.ToFloat64(m.vaultFailures.WithLabelValues("vault_full")), 1},
		{"websocket", testutil.ToFloat64(m.upgrades.WithLabelValues("openai_responses")), 1},
		{"latency series", float64(testutil.CollectAndCount(m.latency)), 6}, // read, queue, parse, vault, gate, compile
		{"compile observations", histCount(t, m, stageCompile), 3},
		{"queue observations", histCount(t, m, stageQueue), 3}, // every compiled request asked for a slot
		// The vault_full compile never reached the gate.
		{"gate observations", histCount(t, m, stageGate), 2},
		{"gate seconds", histSum(t, m, stageGate), 0.022},
		{"compile seconds", histSum(t, m, stageCompile), 0.033},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// Labels stay bounded: raw model names never appear.
	if n := testutil.CollectAndCount(m.candidates); n != 3 {
		t.Errorf("%d candidate series, want 3", n)
	}

	// The ledger records carry the same figures.
	h.Ledger.Flush(context.Background())
	recs, err := store.ReadLedger(context.Background(), vault.LedgerQuery{})
	if err != nil || len(recs) != len(results) {
		t.Fatalf("%d ledger records (err %v)", len(recs), err)
	}
	first := recs[len(recs)-1] // newest first
	wantUsage := vault.LedgerUsage{Uncached: 100, CacheRead: 300, Cost: 130, Output: 9}
	if first.TenantLabel != "team-a" || first.CostHorizonRaw != 1200 || first.CostHorizonSent != 700 || first.Usage == nil || *first.Usage != wantUsage {
		t.Fatalf("first record %+v usage %+v", first, first.Usage)
	}
	if last := recs[0]; last.CostHorizonRaw != 0 || last.Usage == nil || last.Usage.Uncached != 50 || last.Usage.Cost != 50 {
		t.Fatalf("last record %+v usage %+v", last, last.Usage)
	}
}

func TestModelFamily(t *testing.T) {
	tests := map[string]string{
		"":                           "unknown",
		"gpt-4o-2024-08-06":          "gpt-4o",
		"openai/gpt-4o-mini":         "gpt-4o",
		"gpt-4.1-nano":               "gpt-4.1",
		"gpt-4-turbo":                "gpt-4",
		"gpt-5-codex":                "gpt-5",
		"o3-mini":                    "o3",
		"claude-3-5-sonnet-20241022": "claude-sonnet",
		"claude-opus-4-1":            "claude-opus",
		"anthropic/claude-haiku-4-5": "claude-haiku",
		"claude-2":                   "claude",
		"meta-llama/Llama-3.1-70B":   "llama",
		"my-finetune-for-acme-corp":  "other",
	}
	for in, want := range tests {
		if got := provider.ModelLabel(in); got != want {
			t.Errorf("provider.ModelLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestUsageFigures: the provider's usage split by how it was billed and
// priced by the request's cost model, configured overrides included
// (hand-computed from the published multipliers).
func TestUsageFigures(t *testing.T) {
	half := 0.5
	tests := []struct {
		name   string
		format provider.Format
		model  string
		prices map[cost.Family]cost.Overrides
		u      provider.Usage
		want   *vault.LedgerUsage
	}{
		{"anthropic reads at 0.1, writes at 1.25", "anthropic_messages", "claude-sonnet-4-5", nil,
			provider.Usage{Input: 1000 + 800 + 200, CacheRead: 800, CacheWrite: 200, Output: 7, Known: true},
			&vault.LedgerUsage{Uncached: 1000, CacheRead: 800, CacheWrite: 200, Cost: 1000 + 80 + 250, Output: 7}},
		{"anthropic 1-hour writes at 2", "anthropic_messages", "claude-sonnet-4-5", nil,
			provider.Usage{Input: 10 + 500, CacheWrite: 500, CacheWrite1h: 300, Known: true},
			&vault.LedgerUsage{Uncached: 10, CacheWrite: 500, Cost: 10 + 200*1.25 + 300*2}},
		{"gpt-4.1 reads at 0.25", "openai_responses", "gpt-4.1-mini", nil,
			provider.Usage{Input: 4096, CacheRead: 2048, Known: true},
			&vault.LedgerUsage{Uncached: 2048, CacheRead: 2048, Cost: 2048 + 512}},
		{"cost_prices override", "anthropic_messages", "claude-opus-4", map[cost.Family]cost.Overrides{"anthropic": {CacheRead: &half}},
			provider.Usage{Input: 300, CacheRead: 200, Known: true},
			&vault.LedgerUsage{Uncached: 100, CacheRead: 200, Cost: 100 + 100}},
		{"no usage", "openai_chat", "gpt-4o", nil, provider.Usage{}, nil},
		// A bypassed body: no model from the request, the answer's prices it
		// (gpt-4o reads at 0.5, not the unknown family's 0.1).
		{"the answer's model", "openai_chat", "", nil,
			provider.Usage{Input: 2048, CacheRead: 1024, Model: "gpt-4o-2024-08-06", Known: true},
			&vault.LedgerUsage{Uncached: 1024, CacheRead: 1024, Cost: 1024 + 512}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg cost.Config // as caddymodule maps cost_prices
			for f, o := range tt.prices {
				if !cfg.SetOverrides(f, o) {
					t.Fatalf("family %s", f)
				}
			}
			h := &Gateway{Prices: &cfg}
			got := h.usageFigures(&outcome{format: tt.format, usage: tt.u, model: tt.model})
			if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestLedgerWriterBatches: records reach the vault off the request path
// and a flush makes every queued record readable.
func TestLedgerWriterBatches(t *testing.T) {
	s, err := badgervault.Open(badgervault.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := NewMetrics()
	w := NewLedgerWriter(s, vault.LedgerLimits{Retention: time.Hour, MaxRecords: 1000, MaxBytes: 1 << 20}, m, zap.NewNop())
	now := time.Now()
	for i := range 600 {
		w.Add(vault.LedgerRecord{Time: now.Add(time.Duration(i) * time.Millisecond).UnixMilli(), Decision: "accepted", RawBytes: int64(i)})
	}
	w.Flush(context.Background())
	got, err := s.ReadLedger(context.Background(), vault.LedgerQuery{})
	if err != nil || len(got) != 600 || got[0].RawBytes != 599 {
		t.Fatalf("%d records (err %v), want 600 newest first", len(got), err)
	}
	w.Add(vault.LedgerRecord{Time: now.Add(time.Second).UnixMilli(), Decision: "passthrough"})
	w.Close()
	if got, _ = s.ReadLedger(context.Background(), vault.LedgerQuery{}); len(got) != 601 {
		t.Fatalf("close did not write the queue: %d records", len(got))
	}
	if v := testutil.ToFloat64(m.ledgerDropped); v != 0 {
		t.Fatalf("dropped %v", v)
	}
}

// TestTenantLabel: a label names a tenant id (the keyed hash under the
// tenant key) whole; a credential whose unkeyed hash the operator might
// have known matches nothing, and no prefix matches.
func TestTenantLabel(t *testing.T) {
	h := &Gateway{}
	h.Tenants = TenantHasher([]byte("0123456789abcdef0123456789abcdef"))
	id := h.Tenants("Bearer sk-acme")
	h.TenantLabels = map[string]string{id: "acme"}
	for tenant, want := range map[string]string{
		id:                           "acme",
		h.Tenants("Bearer sk-other"): "",
		id[:31]:                      "",
		sha256Hex("sk-acme")[:32]:    "",
		"":                           "",
	} {
		if got := h.tenantLabel(tenant); got != want {
			t.Errorf("tenant %q: label %q, want %q", tenant, got, want)
		}
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// BenchmarkAccount is what a finished candidate adds: metrics and the
// ledger record queued (the writer drains it concurrently), without and
// with the provider's usage to price.
func BenchmarkAccount(b *testing.B) {
	s, err := badgervault.Open(badgervault.Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	h := &Gateway{}
	h.Prices = &cost.Config{} // as provision maps it
	h.Metrics = NewMetrics()
	h.Ledger = NewLedgerWriter(s, vault.LedgerLimits{Retention: time.Hour, MaxRecords: 1 << 20, MaxBytes: 1 << 30}, h.Metrics, zap.NewNop())
	defer h.Ledger.Close()
	ex := &exchange{start: time.Now(), out: outcome{decision: compiler.Accepted, format: "openai_chat", rawBytes: 100000, sentBytes: 20000,
		receipts: 3, compiled: true, tenant: "t1", tokens: compiler.TokenReport{Status: artifact.TokensExact, Raw: 25000, Sent: 5000},
		family: "gpt-4o", conversation: "c_1", kinds: compiler.ReceiptKinds{Lease: 3}, costRaw: 25000, costSent: 6000}}
	// A request is accounted once: each iteration accounts a fresh copy.
	b.Run("no usage", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e := *ex
			h.account(&e)
		}
	})
	ex.out.usage = provider.Usage{Input: 25000, CacheRead: 18000, Output: 300, Known: true}
	b.Run("usage", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e := *ex
			h.account(&e)
		}
	})
}

// stuckLedger blocks every append until released: a vault that hangs.
type stuckLedger struct{ release chan struct{} }

func (s stuckLedger) AppendLedger(ctx context.Context, _ []vault.LedgerRecord, _ vault.LedgerLimits) error {
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return ctx.Err()
}

func (stuckLedger) ReadLedger(context.Context, vault.LedgerQuery) ([]vault.LedgerRecord, error) {
	return nil, nil
}

// TestLedgerNeverBlocksRequests: with the vault hanging, adding records
// returns at once; what does not fit the queue is dropped and counted.
func TestLedgerNeverBlocksRequests(t *testing.T) {
	st := stuckLedger{release: make(chan struct{})}
	m := NewMetrics()
	w := NewLedgerWriter(st, vault.LedgerLimits{Retention: time.Hour, MaxRecords: 1, MaxBytes: 1}, m, zap.NewNop())
	const n = 3 * ledgerQueue
	done := make(chan struct{})
	go func() {
		for i := range n {
			w.Add(vault.LedgerRecord{Time: int64(i)})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("add blocked on a hanging vault")
	}
	// At most the queue and one batch in the writer's hands are kept.
	if d := testutil.ToFloat64(m.ledgerDropped); d < n-ledgerQueue-ledgerBatch {
		t.Fatalf("dropped %v of %d", d, n)
	}
	close(st.release)
	w.Close()
}

// TestMetricsCostDearerThanRaw: a request judged dearer than its all-raw
// baseline is counted as extra, not subtracted from a counter (which would
// panic), and the request is answered.
func TestMetricsCostDearerThanRaw(t *testing.T) {
	small := []byte(`{"model":"gpt-4o","messages":[]}`)
	fc := &fakeCompiler{fn: func(ctx context.Context, req compiler.Request) compiler.Result {
		return compiler.Result{Decision: compiler.Accepted, Body: small, Format: "openai_chat", Model: "gpt-4o",
			RawBytes: len(req.Body), SentBytes: len(small), Receipts: 1, Kinds: compiler.ReceiptKinds{Lease: 1},
			Tokens:  compiler.TokenReport{Status: artifact.TokensEstimate, Raw: 100, Sent: 120},
			CostRaw: 1000, CostSent: 1300}
	}}
	h := observedHandler(t, fc, nil)
	w, s := serve(t, h, newRequest(http.MethodPost, chatPath, strings.NewReader(`{"model":"gpt-4o","messages":[`+strings.Repeat(" ", 200)+`]}`)))
	if s.calls != 1 || w.Code != http.StatusOK {
		t.Fatalf("calls %d code %d", s.calls, w.Code)
	}
	m := h.Metrics
	if v := testutil.ToFloat64(m.cost.WithLabelValues("openai_chat", "gpt-4o", "extra")); v != 300 {
		t.Fatalf("extra %v, want 300", v)
	}
	if v := testutil.ToFloat64(m.cost.WithLabelValues("openai_chat", "gpt-4o", "saved")); v != 0 {
		t.Fatalf("saved %v, want 0", v)
	}
	if v := testutil.ToFloat64(m.tokens.WithLabelValues("openai_chat", "gpt-4o", "saved")); v != 0 {
		t.Fatalf("tokens saved %v, want 0", v)
	}
}

// histCount and histSum read one stage's latency histogram (format
// openai_chat) as a scrape would.
func histCount(t *testing.T, m *Metrics, stage string) float64 {
	count, _ := histogram(t, m, stage)
	return count
}

func histSum(t *testing.T, m *Metrics, stage string) float64 {
	_, sum := histogram(t, m, stage)
	return math.Round(sum*1e6) / 1e6 // a sum of float seconds is not exact
}

func histogram(t *testing.T, m *Metrics, stage string) (count, sum float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.latency)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["stage"] == stage && labels["format"] == "openai_chat" {
				return float64(s.GetHistogram().GetSampleCount()), s.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0, 0
}

// TestObserveCostJudged: the provider's usage counts as actual whenever it
// came back, and against the expected figures only for a judged request
// that went upstream once (a recovery round's usage sums several).
func TestObserveCostJudged(t *testing.T) {
	tests := []struct {
		name           string
		costRaw        float64
		rounds         int
		actual, judged float64
		expectedJudged float64
	}{
		{"judged", 100, 0, 40, 40, 60},
		{"not judged (cost model off, bypass)", 0, 0, 40, 0, 0},
		{"recovery round", 100, 1, 40, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMetrics()
			o := &outcome{format: "openai_chat", family: "gpt-4o", label: "team-a", costRaw: tt.costRaw, costSent: 60,
				billed: &vault.LedgerUsage{Uncached: 40, Cost: 40, RecoveryRounds: tt.rounds}}
			m.observeCost(o)
			got := []float64{
				testutil.ToFloat64(m.tenantCost.WithLabelValues("team-a", costKindActual)),
				testutil.ToFloat64(m.cost.WithLabelValues("openai_chat", "gpt-4o", costKindActualJudged)),
				testutil.ToFloat64(m.tenantCost.WithLabelValues("team-a", costKindExpectedJudged)),
			}
			if want := []float64{tt.actual, tt.judged, tt.expectedJudged}; !slices.Equal(got, want) {
				t.Fatalf("actual, actual_judged, expected_judged = %v, want %v", got, want)
			}
		})
	}
}

// TestRecoveryRoundsCounted: the rounds of a request's recovery loop, as
// its outcome notes them, reach recovery_rounds_total by format.
func TestRecoveryRoundsCounted(t *testing.T) {
	m := NewMetrics()
	m.observe(&outcome{format: "anthropic_messages", family: "claude-sonnet", recovery: recoveryReport{offered: true, rounds: 2}})
	m.observe(&outcome{format: "anthropic_messages", family: "claude-sonnet", recovery: recoveryReport{offered: true}})
	if v := testutil.ToFloat64(m.recoveryRounds.WithLabelValues("anthropic_messages")); v != 2 {
		t.Fatalf("recovery_rounds_total %v, want 2", v)
	}
}

// stubArtifacts answers every read with one artifact.
type stubArtifacts struct{}

func (stubArtifacts) Get(context.Context, string, artifact.Digest) (artifact.Artifact, bool, error) {
	return artifact.Artifact{Text: "x"}, true, nil
}
func (stubArtifacts) Resolve(context.Context, string, string) (artifact.Digest, bool, error) {
	return artifact.Digest{1}, true, nil
}
func (stubArtifacts) Search(context.Context, string, string, int) ([]artifact.Artifact, error) {
	return []artifact.Artifact{{Tool: "t"}}, nil
}

// TestRecoveryReadsCounted: every vault read of the artifact API and the
// recovery tool reaches recovery_reads_total by action, and the reads'
// answers pass through unchanged.
func TestRecoveryReadsCounted(t *testing.T) {
	g := &Gateway{Metrics: NewMetrics()}
	arts := countedArtifacts{Artifacts: stubArtifacts{}, g: g}
	ctx := context.Background()
	a, ok, err := arts.Get(ctx, "t", artifact.Digest{1})
	arts.Get(ctx, "t", artifact.Digest{2})
	hits, _ := arts.Search(ctx, "t", "q", 5)
	arts.Resolve(ctx, "t", "a_00")
	if a.Text != "x" || !ok || err != nil || len(hits) != 1 {
		t.Fatalf("reads changed: %+v %v %v %v", a, ok, err, hits)
	}
	for action, want := range map[string]float64{"get": 2, "search": 1} {
		if v := testutil.ToFloat64(g.Metrics.recoveryReads.WithLabelValues(action)); v != want {
			t.Errorf("recovery_reads_total{action=%q} = %v, want %v", action, v, want)
		}
	}
	var nilMetrics Gateway // no metrics: reads still answer
	if _, ok, _ := (countedArtifacts{Artifacts: stubArtifacts{}, g: &nilMetrics}).Get(ctx, "t", artifact.Digest{}); !ok {
		t.Fatal("a gateway without metrics failed a read")
	}
}
