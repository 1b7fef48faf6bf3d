package caddymodule

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// observation is what the metrics and the ledger need of a compile beyond
// the report: nothing in it is content. The model is already normalized
// and the conversation keyed by the tenant.
type observation struct {
	family       string // modelFamily of the request's model
	conversation string
	kinds        compiler.ReceiptKinds
	costRaw      float64
	costSent     float64
	model        string             // the request's model as sent: only to pick its cost model, never recorded
	usage        *vault.LedgerUsage // the provider's usage priced (usageFigures); nil when none came back
	label        string             // the operator's tenant label, if one matches
	accounted    bool               // counted and queued: a request is accounted once
	hold         holdoutObs         // the request's holdout arm (holdout.go)
}

// note keeps what the observation needs of a compile; conversation is
// its keyed id (Handler.conversationID).
func (ob *observation) note(res compiler.Result, conversation string) {
	ob.family = modelFamily(res.Model)
	ob.model = res.Model
	ob.kinds = res.Kinds
	ob.costRaw, ob.costSent = res.CostRaw, res.CostSent
	ob.conversation = conversation
}

// Ledger defaults.
const (
	DefaultLedgerRetention  = 30 * 24 * time.Hour
	DefaultLedgerMaxRecords = 200000
	DefaultLedgerMaxBytes   = 64 << 20
	// ledgerQueue bounds the records waiting to be written; past it new
	// records are dropped (and counted), never waited for.
	ledgerQueue = 4096
	ledgerBatch = 256
	ledgerEvery = time.Second
)

// ledgerWriter writes ledger records in batches off the request path. It
// belongs to one open vault (openVault.ledger) and stops with it.
type ledgerWriter struct {
	store vault.Ledger
	lim   vault.LedgerLimits
	m     *metrics
	log   *zap.Logger

	in      chan vault.LedgerRecord
	flushes chan chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

func newLedgerWriter(store vault.Ledger, lim vault.LedgerLimits, m *metrics, log *zap.Logger) *ledgerWriter {
	w := &ledgerWriter{
		store: store, lim: lim, m: m, log: log,
		in:      make(chan vault.LedgerRecord, ledgerQueue),
		flushes: make(chan chan struct{}),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go w.run()
	return w
}

// add queues a record; it never blocks.
func (w *ledgerWriter) add(r vault.LedgerRecord) {
	select {
	case w.in <- r:
	default:
		w.m.ledgerDropped.Inc()
	}
}

// flush writes everything queued before it was called; the admin API
// calls it so that what it reads includes every finished request.
func (w *ledgerWriter) flush(ctx context.Context) {
	done := make(chan struct{})
	select {
	case w.flushes <- done:
	case <-w.done:
		return
	case <-ctx.Done():
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// close writes what is queued and stops the writer.
func (w *ledgerWriter) close() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

func (w *ledgerWriter) run() {
	defer close(w.done)
	t := time.NewTicker(ledgerEvery)
	defer t.Stop()
	batch := make([]vault.LedgerRecord, 0, ledgerBatch)
	write := func() {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := w.store.AppendLedger(ctx, batch, w.lim)
		cancel()
		if err != nil {
			w.m.ledgerFailures.Inc()
			w.log.Warn("ledger batch not written", zap.Int("records", len(batch)), zap.Error(err))
		}
		batch = batch[:0]
	}
	drain := func() {
		for {
			select {
			case r := <-w.in:
				batch = append(batch, r)
				if len(batch) == ledgerBatch {
					write()
				}
			default:
				return
			}
		}
	}
	for {
		select {
		case r := <-w.in:
			batch = append(batch, r)
			if len(batch) == ledgerBatch {
				write()
			}
		case <-t.C:
			write()
		case done := <-w.flushes:
			drain()
			write()
			close(done)
		case <-w.stop:
			drain()
			write()
			return
		}
	}
}

// ledgerRecord is the content-free record of a finished candidate.
func ledgerRecord(rep *report, ob *observation, at time.Time) vault.LedgerRecord {
	r := vault.LedgerRecord{
		Time:         at.UnixMilli(),
		Tenant:       rep.tenant,
		TenantLabel:  ob.label,
		Conversation: ob.conversation,
		Format:       rep.format,
		Model:        ob.family,
		Status:       rep.written,
		Decision:     string(rep.decisionWord()),
		Reason:       string(rep.reason),
		RawBytes:     max(rep.rawBytes, 0),
		SentBytes:    max(rep.sentBytes, 0),
		Receipts:     rep.receipts,
		Folded:       rep.folded,
		CostRaw:      ob.costRaw,
		CostSent:     ob.costSent,
		// The report owns the horizon figures (report.fromResult).
		CostHorizonRaw:  rep.costHorizonRaw,
		CostHorizonSent: rep.costHorizonSent,
		Usage:           ob.usage,
	}
	if rep.tokens.Status.Measured() {
		r.RawTokens, r.SentTokens = rep.tokens.Raw, rep.tokens.Sent
	}
	holdoutRecord(&r, ob) // holdout.go
	return r
}

// ledgerLimits are the handler's ledger settings with defaults applied.
func (h *Handler) ledgerLimits() vault.LedgerLimits {
	lim := vault.LedgerLimits{Retention: DefaultLedgerRetention, MaxRecords: DefaultLedgerMaxRecords, MaxBytes: DefaultLedgerMaxBytes}
	if h.LedgerRetention > 0 {
		lim.Retention = time.Duration(h.LedgerRetention)
	}
	if h.LedgerMaxRecords != nil {
		lim.MaxRecords = *h.LedgerMaxRecords
	}
	if h.LedgerMaxBytes != nil {
		lim.MaxBytes = *h.LedgerMaxBytes
	}
	return lim
}

// startLedger gives an open vault its ledger writer if its backend keeps
// a ledger; the first handler to open the vault sets the limits.
func (o *openVault) startLedger(lim vault.LedgerLimits, m *metrics, log *zap.Logger) *ledgerWriter {
	o.ledgerOnce.Do(func() {
		if l, ok := o.backend.(vault.Ledger); ok {
			o.ledger.Store(newLedgerWriter(l, lim, m, log))
		}
	})
	return o.ledger.Load()
}

// tenantLabel is the operator's name for a tenant: the label configured
// for its id (the ledger's tenant field, a keyed hash under the tenant
// key), matched whole. Only a verified tenant has an id to match.
func (h *Handler) tenantLabel(tenant string) string {
	if tenant == "" || len(h.TenantLabels) == 0 {
		return ""
	}
	return h.TenantLabels[tenant]
}

// account counts a finished candidate in the metrics and queues its
// ledger record.
func (h *Handler) account(r *http.Request, ex *exchange) {
	if h.metrics == nil {
		return
	}
	defer func() {
		// Accounting never fails a request that has been answered.
		if v := recover(); v != nil {
			h.logger.Error("accounting a request panicked; metrics or ledger record skipped", zap.String("panic_type", fmt.Sprintf("%T", v)))
		}
	}()
	ob := &ex.obs
	if ob.accounted {
		return
	}
	ob.accounted = true
	if ob.family == "" {
		ob.family = "unknown"
	}
	ob.label = h.tenantLabel(ex.rep.tenant)
	ob.usage = h.usageFigures(&ex.rep, ob)
	h.metrics.observe(&ex.rep, ob)
	// Only a verified tenant's requests are recorded: requests without a
	// tenant or of one the provider has not accepted would let anyone push
	// the history out with cheap requests.
	if h.ledger != nil && ex.rep.tenant != "" {
		rec := ledgerRecord(&ex.rep, ob, ex.start)
		rec.Price, rec.Currency = h.priceOf(ex.rep.format, ob.model)
		h.ledger.add(rec)
	}
}

// costModel is the cost model of a request: from the configuration
// mapped at provision, or (a handler that was not provisioned, in tests)
// mapped now.
func (h *Handler) costModel(format, model string) cost.Model {
	if h.prices != nil {
		return h.prices.Model(format, model)
	}
	cfg, _ := h.costConfig()
	return cfg.Model(format, model)
}

// usageFigures splits the provider's reported input tokens by how they
// are billed and prices them by the request's cost model (the same
// multipliers the expected figures use), so what the provider billed can
// be set against what was expected. nil when the answer carried no usage.
// Anthropic's 1-hour cache writes are priced at their own rate when the
// response splits them out (cache_creation).
func (h *Handler) usageFigures(rep *report, ob *observation) *vault.LedgerUsage {
	u := rep.usage
	if !u.Known {
		return nil
	}
	m := h.costModel(rep.format, cmp.Or(ob.model, u.Model)) // a bypassed body: the model the answer names
	lu := &vault.LedgerUsage{
		// Input counts every input token, cached and written ones too
		// (response.Usage).
		Uncached:       max(u.Input-u.CacheRead-u.CacheWrite, 0),
		CacheRead:      u.CacheRead,
		CacheWrite:     u.CacheWrite,
		RecoveryRounds: rep.recovery.rounds,
		Output:         u.Output,
	}
	lu.Cost = m.Charge(float64(lu.CacheRead), float64(lu.CacheWrite), float64(u.CacheWrite1h), float64(lu.Uncached))
	return lu
}
