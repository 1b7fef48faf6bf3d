package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// Metrics are the gateway's Prometheus series. They live in the App's
// shared state, so their values survive `caddy reload`, and are registered
// on each loaded config's registry (ctx.GetMetricsRegistry(), served by the
// admin API's /metrics). Labels are bounded: format, decision, reason,
// receipt kind, stage, the normalized model family and the operator's
// tenant labels (tenant_label, a configured set); never tenant ids,
// conversation ids or raw model names.
type Metrics struct {
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

// NewMetrics makes the series, registered nowhere yet.
func NewMetrics() *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Name: name, Help: help}, labels)
	}
	return &Metrics{
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
		holdout: newHoldoutMetrics(counter),
	}
}

// Collectors are the series, for a registry.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.candidates, m.bytes, m.tokens, m.cost, m.tenantCost, m.usageTokens, m.receipts, m.failOpen, m.vaultFailures,
		m.recoveryRounds, m.recoveryReads, m.upgrades, m.latency, m.ledgerDropped, m.ledgerFailures,
		m.holdout.requests, m.holdout.billed, m.holdout.raw, m.holdout.shadow}
}

// failureReasons are the pass-through reasons that count as fail-open
// events: something failed, timed out or was odd. The others are ordinary
// decisions (nothing to do, not worth it, asked not to).
func isFailOpen(r compiler.Reason) bool {
	switch r {
	case "", compiler.ReasonOff, compiler.ReasonNotCandidate, compiler.ReasonNoSlots, compiler.ReasonNothingToDo,
		compiler.ReasonNotSmaller, compiler.ReasonMoreTokens, compiler.ReasonNotCheaper,
		compiler.ReasonProviderContextManagement, ReasonNoTenant, ReasonBypass, ReasonUnverifiedTenant,
		compiler.ReasonHoldout:
		return false
	}
	return true
}

// observe counts one finished candidate.
func (m *Metrics) observe(o *outcome) {
	format, model := o.format, o.family
	decision := string(o.decisionWord())
	m.candidates.WithLabelValues(string(format), decision, string(o.reason), model).Inc()
	if o.rawBytes >= 0 {
		m.bytes.WithLabelValues(string(format), model, "raw").Add(float64(o.rawBytes))
		sent := o.sentBytes
		if o.decision != compiler.Accepted {
			sent = o.rawBytes // shadow reports what would have gone; the original went
		}
		m.bytes.WithLabelValues(string(format), model, "sent").Add(float64(sent))
		m.bytes.WithLabelValues(string(format), model, "saved").Add(float64(max(o.rawBytes-sent, 0)))
	}
	if o.tokens.Status.Measured() {
		sent := o.tokens.Sent
		if o.decision != compiler.Accepted {
			sent = o.tokens.Raw
		}
		m.tokens.WithLabelValues(string(format), model, "raw").Add(float64(o.tokens.Raw))
		m.tokens.WithLabelValues(string(format), model, "sent").Add(float64(sent))
		m.tokens.WithLabelValues(string(format), model, "saved").Add(float64(max(o.tokens.Raw-sent, 0)))
	}
	m.observeCost(o)
	m.holdout.observe(o) // holdout_metrics.go
	if o.decision == compiler.Accepted {
		kinds := [...]struct {
			kind string
			n    int
		}{
			{receiptDuplicate, o.kinds.Duplicate}, {receiptLease, o.kinds.Lease},
			{receiptCompaction, o.kinds.Compaction}, {receiptFoldedTurn, o.folded},
		}
		for _, k := range kinds {
			if k.n > 0 {
				m.receipts.WithLabelValues(string(format), k.kind).Add(float64(k.n))
			}
		}
	}
	if o.decision == compiler.Passthrough && isFailOpen(o.reason) {
		m.failOpen.WithLabelValues(string(o.reason)).Inc()
	}
	if o.reason == compiler.ReasonVaultFull || o.reason == compiler.ReasonVaultError {
		m.vaultFailures.WithLabelValues(string(o.reason)).Inc()
	}
	m.latency.WithLabelValues(stageRead, string(format)).Observe(o.read.Seconds())
	if o.queue > 0 {
		m.latency.WithLabelValues(stageQueue, string(format)).Observe(o.queue.Seconds())
	}
	if o.compiled {
		m.latency.WithLabelValues(stageParse, string(format)).Observe(o.parse.Seconds())
		m.latency.WithLabelValues(stageVault, string(format)).Observe(o.vault.Seconds())
		m.latency.WithLabelValues(stageCompile, string(format)).Observe(o.compile.Seconds())
		if o.gate > 0 {
			m.latency.WithLabelValues(stageGate, string(format)).Observe(o.gate.Seconds())
		}
	}
	if o.committed {
		m.latency.WithLabelValues(stageCommit, string(format)).Observe(o.commit.Seconds())
	}
	if o.recovery.rounds > 0 {
		m.recoveryRounds.WithLabelValues(string(format)).Add(float64(o.recovery.rounds))
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
func (m *Metrics) observeCost(o *outcome) {
	byModel := func(kind string, v float64) { m.cost.WithLabelValues(string(o.format), o.family, kind).Add(v) }
	tenant := o.label
	if tenant == "" {
		tenant = untenanted
	}
	both := func(kind string, v float64) {
		byModel(kind, v)
		m.tenantCost.WithLabelValues(tenant, kind).Add(v)
	}
	if o.costRaw > 0 {
		both(costKindRaw, o.costRaw)
		both(costKindSent, o.costSent)
		// What was sent can be judged dearer than the all-raw baseline
		// (it counts what the conversation's earlier rewrites did to the
		// cache); a counter never decreases, so that goes apart.
		if d := o.costRaw - o.costSent; d >= 0 {
			byModel(costKindSaved, d)
		} else {
			byModel(costKindExtra, -d)
		}
	}
	if o.costHorizonRaw > 0 {
		both(costKindHorizonRaw, o.costHorizonRaw)
		both(costKindHorizonSent, o.costHorizonSent)
	}
	if u := o.billed; u != nil {
		both(costKindActual, u.Cost)
		if o.costRaw > 0 && u.RecoveryRounds == 0 { // the expected figures are of one upstream request
			both(costKindActualJudged, u.Cost)
			both(costKindExpectedJudged, o.costSent)
		}
		for _, k := range [...]struct {
			kind string
			n    int
		}{{usageUncached, u.Uncached}, {usageCacheRead, u.CacheRead}, {usageCacheWrite, u.CacheWrite}} {
			m.usageTokens.WithLabelValues(string(o.format), o.family, k.kind).Add(float64(k.n))
		}
	}
}

// RecoveryRound and RecoveryRead are the hooks of the recovery path; safe
// on nil metrics.
func (m *Metrics) RecoveryRound(format provider.Format) {
	if m != nil {
		m.recoveryRounds.WithLabelValues(string(format)).Inc()
	}
}

func (m *Metrics) RecoveryRead(action string) {
	if m != nil {
		m.recoveryReads.WithLabelValues(action).Inc()
	}
}
