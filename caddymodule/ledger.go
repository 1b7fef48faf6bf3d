package caddymodule

import (
	"time"

	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/gateway"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// Ledger defaults.
const (
	DefaultLedgerRetention  = 30 * 24 * time.Hour
	DefaultLedgerMaxRecords = 200000
	DefaultLedgerMaxBytes   = 64 << 20
)

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
func (o *openVault) startLedger(lim vault.LedgerLimits, m *gateway.Metrics, log *zap.Logger) *gateway.LedgerWriter {
	o.ledgerOnce.Do(func() {
		if l, ok := o.backend.(vault.Ledger); ok {
			o.ledger.Store(gateway.NewLedgerWriter(l, lim, m, log))
		}
	})
	return o.ledger.Load()
}
