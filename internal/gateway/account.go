package gateway

import (
	"cmp"
	"fmt"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// tenantLabel is the operator's name for a tenant: the label configured
// for its id (the ledger's tenant field, a keyed hash under the tenant
// key), matched whole. Only a verified tenant has an id to match.
func (g *Gateway) tenantLabel(tenant string) string {
	if tenant == "" || len(g.TenantLabels) == 0 {
		return ""
	}
	return g.TenantLabels[tenant]
}

// account completes a finished candidate's outcome, counts it in the
// metrics and queues its ledger record, once.
func (g *Gateway) account(ex *exchange) {
	o := &ex.out
	if g.Metrics == nil || o.accounted {
		return
	}
	o.accounted = true
	defer func() {
		// Accounting never fails a request that has been answered.
		if v := recover(); v != nil {
			g.Logger.Error("accounting a request panicked; metrics or ledger record skipped", zap.String("panic_type", fmt.Sprintf("%T", v)))
		}
	}()
	if o.family == "" {
		o.family = "unknown"
	}
	o.label = g.tenantLabel(o.tenant)
	o.billed = g.usageFigures(o)
	g.Metrics.observe(o)
	if o.reason == compiler.ReasonInvalidOutput {
		// The log line's running total is the metric's own count.
		o.invalidTotal = g.Metrics.failOpenTotal(compiler.ReasonInvalidOutput)
	}
	// Only a verified tenant's requests are recorded: requests without a
	// tenant or of one the provider has not accepted would let anyone push
	// the history out with cheap requests.
	if g.Ledger != nil && o.tenant != "" {
		rec := ledgerRecord(o, ex.start)
		if g.PriceOf != nil {
			rec.Price, rec.Currency = g.PriceOf(o.format, o.model)
		}
		g.Ledger.Add(rec)
	}
}

// failOpenTotal reads fail_open_total of reason.
func (m *Metrics) failOpenTotal(reason compiler.Reason) uint64 {
	var d dto.Metric
	if err := m.failOpen.WithLabelValues(string(reason)).Write(&d); err != nil {
		return 0
	}
	return uint64(d.GetCounter().GetValue())
}

// costModel is the cost model of a request, from the cost configuration
// (the default one when none is set).
func (g *Gateway) costModel(format provider.Format, model string) cost.Model {
	if g.Prices != nil {
		return g.Prices.Model(format, model)
	}
	return (&cost.Config{}).Model(format, model)
}

// usageFigures splits the provider's reported input tokens by how they
// are billed and prices them by the request's cost model (the same
// multipliers the expected figures use), so what the provider billed can
// be set against what was expected. nil when the answer carried no usage.
// Anthropic's 1-hour cache writes are priced at their own rate when the
// response splits them out (cache_creation).
func (g *Gateway) usageFigures(o *outcome) *vault.LedgerUsage {
	u := o.usage
	if !u.Known {
		return nil
	}
	m := g.costModel(o.format, cmp.Or(o.model, u.Model)) // a bypassed body: the model the answer names
	lu := &vault.LedgerUsage{
		// Input counts every input token, cached and written ones too
		// (provider.Usage).
		Uncached:       max(u.Input-u.CacheRead-u.CacheWrite, 0),
		CacheRead:      u.CacheRead,
		CacheWrite:     u.CacheWrite,
		RecoveryRounds: o.recovery.rounds,
		Output:         u.Output,
	}
	lu.Cost = m.Charge(float64(lu.CacheRead), float64(lu.CacheWrite), float64(u.CacheWrite1h), float64(lu.Uncached))
	return lu
}
