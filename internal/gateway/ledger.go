package gateway

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// The ledger writer's queue.
const (
	// ledgerQueue bounds the records waiting to be written; past it new
	// records are dropped (and counted), never waited for.
	ledgerQueue = 4096
	ledgerBatch = 256
	ledgerEvery = time.Second
)

// LedgerWriter writes ledger records in batches off the request path. It
// belongs to one open vault (openVault.ledger) and stops with it.
type LedgerWriter struct {
	store vault.Ledger
	lim   vault.LedgerLimits
	m     *Metrics
	log   *zap.Logger

	in      chan vault.LedgerRecord
	flushes chan chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// NewLedgerWriter starts the writer of store's ledger; Close stops it.
func NewLedgerWriter(store vault.Ledger, lim vault.LedgerLimits, m *Metrics, log *zap.Logger) *LedgerWriter {
	w := &LedgerWriter{
		store: store, lim: lim, m: m, log: log,
		in:      make(chan vault.LedgerRecord, ledgerQueue),
		flushes: make(chan chan struct{}),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go w.run()
	return w
}

// Add queues a record; it never blocks.
func (w *LedgerWriter) Add(r vault.LedgerRecord) {
	select {
	case w.in <- r:
	default:
		w.m.ledgerDropped.Inc()
	}
}

// Flush writes everything queued before it was called; the admin API
// calls it so that what it reads includes every finished request.
func (w *LedgerWriter) Flush(ctx context.Context) {
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

// Close writes what is queued and stops the writer.
func (w *LedgerWriter) Close() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

func (w *LedgerWriter) run() {
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
func ledgerRecord(o *outcome, at time.Time) vault.LedgerRecord {
	r := vault.LedgerRecord{
		Time:            at.UnixMilli(),
		Tenant:          o.tenant,
		TenantLabel:     o.label,
		Conversation:    o.conversation,
		Format:          o.format,
		Model:           o.family,
		Status:          o.written,
		Decision:        string(o.decisionWord()),
		Reason:          string(o.reason),
		RawBytes:        max(o.rawBytes, 0),
		SentBytes:       max(o.sentBytes, 0),
		Receipts:        o.receipts,
		Folded:          o.folded,
		CostRaw:         o.costRaw,
		CostSent:        o.costSent,
		CostHorizonRaw:  o.costHorizonRaw,
		CostHorizonSent: o.costHorizonSent,
		Usage:           o.billed,
		WebSocket:       o.websocket,
	}
	if o.tokens.Status.Measured() {
		r.RawTokens, r.SentTokens = o.tokens.Raw, o.tokens.Sent
	}
	holdoutRecord(&r, o) // holdout.go
	return r
}
