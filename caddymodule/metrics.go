package caddymodule

import (
	"errors"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/redisvault"
)

// metrics are the gateway's Prometheus series. They live in the App's
// shared state, so their values survive `caddy reload`, and are registered
// on each loaded config's registry (ctx.GetMetricsRegistry(), served by the
// admin API's /metrics). Labels are bounded: format, decision, reason,
// receipt kind, stage, the normalized model family and the operator's
// tenant labels (tenant_label, a configured set); never tenant ids,
// conversation ids or raw model names.
type metrics struct {
	candidates     *prometheus.CounterVec   // format, decision, reason, model
	bytes          *prometheus.CounterVec   // format, model, kind (raw, sent, saved)
	tokens         *prometheus.CounterVec   // format, model, kind
	cost           *prometheus.CounterVec   // format, model, kind
	tenantCost     *prometheus.CounterVec   // tenant (the operator's label), kind
	usageTokens    *prometheus.CounterVec   // format, model, kind (uncached, cache_read, cache_write)
	receipts       *prometheus.CounterVec   // format, kind
	failOpen       *prometheus.CounterVec   // reason
	vaultFailures  *prometheus.CounterVec   // reason (vault_full, vault_error)
	recoveryRounds *prometheus.CounterVec   // format
	recoveryReads  *prometheus.CounterVec   // action
	upgrades       *prometheus.CounterVec   // format
	latency        *prometheus.HistogramVec // stage, format
	ledgerDropped  prometheus.Counter
	ledgerFailures prometheus.Counter
	vault          *vaultCollector
	holdout        *holdoutMetrics // holdout_metrics.go
}

const metricsNamespace = "token_terminator"

// Receipt kinds, the values of the kind label of receipts_total.
const (
	receiptDuplicate  = "duplicate"
	receiptLease      = "lease"
	receiptCompaction = "compaction"
	receiptFoldedTurn = "folded_turn"
)

// Latency stages, the values of the stage label of duration_seconds.
// parse, vault and gate are parts of compile, observed apart so an operator
// sees which one a slow compile spent its time in.
const (
	stageRead    = "read"    // reading the body
	stageQueue   = "queue"   // waiting for a compile slot (max_concurrent_compiles)
	stageParse   = "parse"   // parsing it
	stageVault   = "vault"   // vault lookups and writes during the compile
	stageGate    = "gate"    // the final gate (bytes, tokens, cost), when a rewrite reached it
	stageCompile = "compile" // the whole compile, gate included
	stageCommit  = "commit"  // recording the lineage after the answer
)

func newMetrics(sh *shared) *metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Name: name, Help: help}, labels)
	}
	return &metrics{
		candidates:     counter("candidate_requests_total", "Candidate provider requests by outcome.", "format", "decision", "reason", "model"),
		bytes:          counter("bytes_total", "Request body bytes: raw (as the client sent), sent (forwarded), saved (raw - sent of accepted rewrites).", "format", "model", "kind"),
		tokens:         counter("tokens_total", "Request tokens as the gate measured them: raw, sent, saved.", "format", "model", "kind"),
		cost:           counter("cost_units_total", costHelp, "format", "model", "kind"),
		tenantCost:     counter("tenant_cost_units_total", "Billed input cost in base-input-token units per tenant label (unlabelled: no tenant_label matched), by kind: "+costKinds, "tenant", "kind"),
		usageTokens:    counter("usage_tokens_total", "Input tokens the provider reported billing, where its answer carried usage: uncached, cache_read, cache_write.", "format", "model", "kind"),
		receipts:       counter("receipts_total", "Receipts forwarded, by kind: duplicate, lease, compaction, folded_turn.", "format", "kind"),
		failOpen:       counter("fail_open_total", "Candidates forwarded unchanged because something failed or was odd, by reason.", "reason"),
		vaultFailures:  counter("vault_write_failures_total", "Compiles whose vault write or lookup failed, by reason.", "reason"),
		recoveryRounds: counter("recovery_rounds_total", "Rounds in which the gateway answered the model's recovery tool calls.", "format"),
		recoveryReads:  counter("recovery_reads_total", "Vault reads through the recovery tool and the artifact API, by action.", "action"),
		upgrades:       counter("websocket_upgrades_total", "WebSocket upgrades of provider paths passed through uncompiled.", "format"),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: metricsNamespace, Name: "duration_seconds",
			Help:    "Time spent per candidate, by stage: read, queue (waiting for a compile slot), parse, vault, gate (the final gate, when a rewrite reached it), compile (parse, vault and gate included), commit.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"stage", "format"}),
		ledgerDropped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "ledger_dropped_total",
			Help: "Ledger records dropped because the writer's queue was full."}),
		ledgerFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "ledger_write_failures_total",
			Help: "Ledger batches the vault refused."}),
		vault:   &vaultCollector{sh: sh},
		holdout: newHoldoutMetrics(counter),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.candidates, m.bytes, m.tokens, m.cost, m.tenantCost, m.usageTokens, m.receipts, m.failOpen, m.vaultFailures,
		m.recoveryRounds, m.recoveryReads, m.upgrades, m.latency, m.ledgerDropped, m.ledgerFailures, m.vault,
		m.holdout.requests, m.holdout.billed, m.holdout.raw, m.holdout.shadow}
}

// register adds the metrics to a config's registry. Registering again
// (another handler or app of the same config) reuses what is there.
func (m *metrics) register(reg *prometheus.Registry) error {
	if reg == nil {
		return nil
	}
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				continue
			}
			return err
		}
	}
	return nil
}

// failureReasons are the pass-through reasons that count as fail-open
// events: something failed, timed out or was odd. The others are ordinary
// decisions (nothing to do, not worth it, asked not to).
func isFailOpen(r compiler.Reason) bool {
	switch r {
	case "", compiler.ReasonOff, compiler.ReasonNotCandidate, compiler.ReasonNoSlots, compiler.ReasonNothingToDo,
		compiler.ReasonNotSmaller, compiler.ReasonMoreTokens, compiler.ReasonNotCheaper,
		compiler.ReasonProviderContextManagement, compiler.ReasonNoTenant, compiler.ReasonBypass, compiler.ReasonUnverifiedTenant,
		compiler.ReasonHoldout:
		return false
	}
	return true
}

// observe counts one finished candidate.
func (m *metrics) observe(rep *report, ob *observation) {
	format, model := rep.format, ob.family
	decision := string(rep.decisionWord())
	m.candidates.WithLabelValues(format, decision, string(rep.reason), model).Inc()
	if rep.rawBytes >= 0 {
		m.bytes.WithLabelValues(format, model, "raw").Add(float64(rep.rawBytes))
		sent := rep.sentBytes
		if rep.decision != compiler.Accepted {
			sent = rep.rawBytes // shadow reports what would have gone; the original went
		}
		m.bytes.WithLabelValues(format, model, "sent").Add(float64(sent))
		m.bytes.WithLabelValues(format, model, "saved").Add(float64(max(rep.rawBytes-sent, 0)))
	}
	if rep.tokens.Status.Measured() {
		sent := rep.tokens.Sent
		if rep.decision != compiler.Accepted {
			sent = rep.tokens.Raw
		}
		m.tokens.WithLabelValues(format, model, "raw").Add(float64(rep.tokens.Raw))
		m.tokens.WithLabelValues(format, model, "sent").Add(float64(sent))
		m.tokens.WithLabelValues(format, model, "saved").Add(float64(max(rep.tokens.Raw-sent, 0)))
	}
	m.observeCost(rep, ob)
	m.holdout.observe(rep, ob) // holdout_metrics.go
	if rep.decision == compiler.Accepted {
		kinds := [...]struct {
			kind string
			n    int
		}{
			{receiptDuplicate, ob.kinds.Duplicate}, {receiptLease, ob.kinds.Lease},
			{receiptCompaction, ob.kinds.Compaction}, {receiptFoldedTurn, rep.folded},
		}
		for _, k := range kinds {
			if k.n > 0 {
				m.receipts.WithLabelValues(format, k.kind).Add(float64(k.n))
			}
		}
	}
	if rep.decision == compiler.Passthrough && isFailOpen(rep.reason) {
		m.failOpen.WithLabelValues(string(rep.reason)).Inc()
	}
	if rep.reason == compiler.ReasonVaultFull || rep.reason == compiler.ReasonVaultError {
		m.vaultFailures.WithLabelValues(string(rep.reason)).Inc()
	}
	m.latency.WithLabelValues(stageRead, format).Observe(rep.read.Seconds())
	if rep.queue > 0 {
		m.latency.WithLabelValues(stageQueue, format).Observe(rep.queue.Seconds())
	}
	if rep.compiled {
		m.latency.WithLabelValues(stageParse, format).Observe(rep.parse.Seconds())
		m.latency.WithLabelValues(stageVault, format).Observe(rep.vault.Seconds())
		m.latency.WithLabelValues(stageCompile, format).Observe(rep.compile.Seconds())
		if rep.gate > 0 {
			m.latency.WithLabelValues(stageGate, format).Observe(rep.gate.Seconds())
		}
	}
	if rep.committed {
		m.latency.WithLabelValues(stageCommit, format).Observe(rep.commit.Seconds())
	}
}

// Values of the kind label of cost_units_total and tenant_cost_units_total.
const (
	costKindRaw         = "raw"          // expected, this request, as if the conversation had gone out raw
	costKindSent        = "sent"         // expected, this request, what was sent
	costKindSaved       = "saved"        // raw - sent where positive (cost_units_total only)
	costKindExtra       = "extra"        // sent - raw where positive (cost_units_total only)
	costKindHorizonRaw  = "horizon_raw"  // expected over the decision's horizon: the original
	costKindHorizonSent = "horizon_sent" // the same for what was sent; never above horizon_raw for a rewrite
	costKindActual      = "actual"       // the provider's reported usage, priced by the cost model
	// The requests that have both (and no recovery rounds, whose usage
	// sums several upstream requests): actual_judged is their priced
	// usage, expected_judged their expected sent cost, so the two compare
	// like for like.
	costKindActualJudged   = "actual_judged"
	costKindExpectedJudged = "expected_judged"
)

const costKinds = "raw and sent (this request's expected cost: as if the conversation had gone out raw, and of what was sent), " +
	"horizon_raw and horizon_sent (the same over the decision's horizon, the cache as the conversation left it), " +
	"actual (the provider's reported usage priced by the cost model), actual_judged and expected_judged (the requests with both: reported and expected)."

const costHelp = "Billed input cost in base-input-token units by kind: " + costKinds +
	" Also saved (raw - sent where positive) and extra (sent - raw where positive)."

// Values of the kind label of usage_tokens_total.
const (
	usageUncached   = "uncached"
	usageCacheRead  = "cache_read"
	usageCacheWrite = "cache_write"
)

// untenanted is the tenant label value of requests no tenant_label names.
const untenanted = "unlabelled"

// observeCost counts a candidate's cost figures, per format and model
// family and per tenant label.
func (m *metrics) observeCost(rep *report, ob *observation) {
	byModel := func(kind string, v float64) { m.cost.WithLabelValues(rep.format, ob.family, kind).Add(v) }
	tenant := ob.label
	if tenant == "" {
		tenant = untenanted
	}
	both := func(kind string, v float64) {
		byModel(kind, v)
		m.tenantCost.WithLabelValues(tenant, kind).Add(v)
	}
	if ob.costRaw > 0 {
		both(costKindRaw, ob.costRaw)
		both(costKindSent, ob.costSent)
		// What was sent can be judged dearer than the all-raw baseline
		// (it counts what the conversation's earlier rewrites did to the
		// cache); a counter never decreases, so that goes apart.
		if d := ob.costRaw - ob.costSent; d >= 0 {
			byModel(costKindSaved, d)
		} else {
			byModel(costKindExtra, -d)
		}
	}
	if rep.costHorizonRaw > 0 {
		both(costKindHorizonRaw, rep.costHorizonRaw)
		both(costKindHorizonSent, rep.costHorizonSent)
	}
	if u := ob.usage; u != nil {
		both(costKindActual, u.Cost)
		if ob.costRaw > 0 && u.RecoveryRounds == 0 { // the expected figures are of one upstream request
			both(costKindActualJudged, u.Cost)
			both(costKindExpectedJudged, ob.costSent)
		}
		for _, k := range [...]struct {
			kind string
			n    int
		}{{usageUncached, u.Uncached}, {usageCacheRead, u.CacheRead}, {usageCacheWrite, u.CacheWrite}} {
			m.usageTokens.WithLabelValues(rep.format, ob.family, k.kind).Add(float64(k.n))
		}
	}
}

// modelFamily normalizes a model name to a small fixed set, so the metric
// label stays bounded whatever clients send: a provider prefix
// ("openai/gpt-4o") and dates or versions after the family are dropped.
func modelFamily(model string) string {
	m := strings.ToLower(model)
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	if m == "" {
		return "unknown"
	}
	for _, f := range modelFamilies {
		if strings.HasPrefix(m, f.prefix) || (f.anywhere && strings.Contains(m, f.prefix)) {
			return f.family
		}
	}
	return "other"
}

// modelFamilies, most specific first.
var modelFamilies = []struct {
	prefix, family string
	anywhere       bool // match inside the name (claude-3-5-sonnet, claude-sonnet-4)
}{
	{"opus", "claude-opus", true},
	{"sonnet", "claude-sonnet", true},
	{"haiku", "claude-haiku", true},
	{"claude", "claude", false},
	{"gpt-5", "gpt-5", false},
	{"gpt-4.1", "gpt-4.1", false},
	{"gpt-4o", "gpt-4o", false},
	{"gpt-4", "gpt-4", false},
	{"gpt-3.5", "gpt-3.5", false},
	{"gpt-oss", "gpt-oss", false},
	{"codex", "codex", false},
	{"o1", "o1", false},
	{"o3", "o3", false},
	{"o4", "o4", false},
	{"gemini", "gemini", false},
	{"llama", "llama", true},
	{"mistral", "mistral", true},
	{"qwen", "qwen", true},
	{"deepseek", "deepseek", true},
}

// vaultCollector reports the open vaults' sizes at scrape time, from the
// backends that keep Stats (Badger, Redis); values are summed over the open
// vaults. A Redis vault's sizes are the fleet's (every replica reports the
// same), its counters the replica's own.
type vaultCollector struct{ sh *shared }

type vaultStatser interface{ Stats() vault.Stats }

// Both built-in backends report their sizes.
var (
	_ vaultStatser = (*vault.Store)(nil)
	_ vaultStatser = (*redisvault.Store)(nil)
)

var (
	descVaultArtifacts = prometheus.NewDesc(metricsNamespace+"_vault_artifacts", "Artifacts stored in the open vaults.", nil, nil)
	descVaultBytes     = prometheus.NewDesc(metricsNamespace+"_vault_bytes", "Bytes counted against the vaults' capacity (content and lineage).", nil, nil)
	descVaultMaxBytes  = prometheus.NewDesc(metricsNamespace+"_vault_max_bytes", "Configured capacity of the open vaults.", nil, nil)
	descVaultWritten   = prometheus.NewDesc(metricsNamespace+"_vault_artifacts_written_total", "Artifacts written since the vaults opened.", nil, nil)
	descVaultEvicted   = prometheus.NewDesc(metricsNamespace+"_vault_evictions_total", "Artifacts evicted since the vaults opened.", nil, nil)
	descVaultCorrupt   = prometheus.NewDesc(metricsNamespace+"_vault_corrupt_total", "Unreadable artifacts found and dropped since the vaults opened.", nil, nil)
)

func (c *vaultCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descVaultArtifacts, descVaultBytes, descVaultMaxBytes, descVaultWritten, descVaultEvicted, descVaultCorrupt} {
		ch <- d
	}
}

func (c *vaultCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	gauge := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	count := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge(descVaultArtifacts, st.Artifacts)
	gauge(descVaultBytes, st.Bytes)
	gauge(descVaultMaxBytes, st.MaxBytes)
	count(descVaultWritten, st.Written)
	count(descVaultEvicted, st.Evicted)
	count(descVaultCorrupt, st.Corrupt)
}

// stats sums the Stats of the open vaults that keep them.
func (c *vaultCollector) stats() vault.Stats {
	var sum vault.Stats
	c.sh.vaults.Range(func(_, v any) bool {
		if s, ok := v.(*openVault).backend.(vaultStatser); ok {
			st := s.Stats()
			sum.Artifacts += st.Artifacts
			sum.Bytes += st.Bytes
			sum.MaxBytes += st.MaxBytes
			sum.Written += st.Written
			sum.Evicted += st.Evicted
			sum.Corrupt += st.Corrupt
		}
		return true
	})
	return sum
}

// registerMetrics registers the App's metrics on the config's registry.
func (a *App) registerMetrics(ctx caddy.Context) error {
	return a.shared.metrics.register(ctx.GetMetricsRegistry())
}

// RecoveryRound counts one round in which the gateway answered the
// model's recovery tool calls (format: the request's format). For the
// recovery wiring, which has the App; a handler has the same as
// h.metrics.recoveryRound. Safe on a nil App.
func (a *App) RecoveryRound(format string) {
	if a != nil && a.shared != nil {
		a.shared.metrics.recoveryRound(format)
	}
}

// RecoveryRead counts one vault read through the recovery tool or the
// artifact API; action is artifact_get or artifact_search. Safe on a nil
// App.
func (a *App) RecoveryRead(action string) {
	if a != nil && a.shared != nil {
		a.shared.metrics.recoveryRead(action)
	}
}

// recoveryRound and recoveryRead are the hooks of the recovery path; safe
// on nil metrics (handlers in tests).
func (m *metrics) recoveryRound(format string) {
	if m != nil {
		m.recoveryRounds.WithLabelValues(format).Inc()
	}
}

func (m *metrics) recoveryRead(action string) {
	if m != nil {
		m.recoveryReads.WithLabelValues(action).Inc()
	}
}
