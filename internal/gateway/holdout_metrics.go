package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
)

// holdoutMetrics are the holdout's series. The measured savings of a
// tenant label and model family is, over any window,
//
//	1 - (billed{arm="treatment"} / raw{arm="treatment"}) / (billed{arm="control"} / raw{arm="control"})
//
// Both counters count the same requests: those in an arm whose answer
// carried usage. The interval needs conversations as units, which
// counters cannot give: the stats and the savings page have it.
type holdoutMetrics struct {
	requests *prometheus.CounterVec // arm, tenant
	billed   *prometheus.CounterVec // arm, tenant, model
	raw      *prometheus.CounterVec // arm, tenant, model
	shadow   *prometheus.CounterVec // outcome (compiled, skipped)
}

func newHoldoutMetrics(counter func(name, help string, labels ...string) *prometheus.CounterVec) *holdoutMetrics {
	return &holdoutMetrics{
		requests: counter("holdout_requests_total", "Requests in a holdout arm (treatment or control), per tenant label.", "arm", "tenant"),
		billed: counter("holdout_billed_cost_units_total",
			"Input cost the provider billed (uncached, cache reads and writes priced by the cost model, base-input-token units), per arm, of requests whose answer carried usage.", "arm", "tenant", "model"),
		raw: counter("holdout_raw_bytes_total",
			"Body bytes the client sent (the raw prompt), per arm, of the same requests as holdout_billed_cost_units_total.", "arm", "tenant", "model"),
		shadow: counter("holdout_shadow_total", "Control requests by what their shadow compile did: compiled, or skipped under load.", "outcome"),
	}
}

// observe counts one finished candidate's arm.
func (m *holdoutMetrics) observe(o *outcome) {
	arm := o.hold.arm()
	if arm == "" {
		return
	}
	tenant := o.label
	if tenant == "" {
		tenant = untenanted
	}
	m.requests.WithLabelValues(arm, tenant).Inc()
	if o.hold.control() {
		outcome := "compiled"
		if o.hold.shadowSkipped {
			outcome = "skipped"
		}
		m.shadow.WithLabelValues(outcome).Inc()
	}
	if o.billed != nil && o.rawBytes >= 0 {
		m.billed.WithLabelValues(arm, tenant, o.family).Add(o.billed.Cost)
		m.raw.WithLabelValues(arm, tenant, o.family).Add(float64(o.rawBytes))
	}
}
