package caddymodule

import (
	"errors"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/badgervault"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/redisvault"
)

// The gateway's per-request series are gateway.Metrics; the App keeps them
// (and the vault collector below) in its shared state, so their values
// survive `caddy reload`, and registers them on each loaded config's
// registry (ctx.GetMetricsRegistry(), served by the admin API's /metrics).

const metricsNamespace = "token_terminator"

// registerMetrics registers the App's metrics on the config's registry.
// Registering again (another handler or app of the same config) reuses
// what is there.
func (a *App) registerMetrics(ctx caddy.Context) error {
	return registerMetrics(ctx.GetMetricsRegistry(), a.shared)
}

func registerMetrics(reg *prometheus.Registry, sh *shared) error {
	if reg == nil {
		return nil
	}
	for _, c := range append(sh.metrics.Collectors(), sh.vaultMetrics) {
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

// vaultCollector reports the open vaults' sizes at scrape time, from the
// backends that keep Stats (Badger, Redis); values are summed over the open
// vaults. A Redis vault's sizes are the fleet's (every replica reports the
// same), its counters the replica's own.
type vaultCollector struct{ sh *shared }

type vaultStatser interface{ Stats() vault.Stats }

// Both built-in backends report their sizes.
var (
	_ vaultStatser = (*badgervault.Store)(nil)
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

// RecoveryRound counts one round in which the gateway answered the
// model's recovery tool calls (format: the request's format). Safe on a
// nil App.
func (a *App) RecoveryRound(format provider.Format) {
	if a != nil && a.shared != nil {
		a.shared.metrics.RecoveryRound(format)
	}
}

// RecoveryRead counts one vault read through the recovery tool or the
// artifact API; action is artifact_get or artifact_search. Safe on a nil
// App.
func (a *App) RecoveryRead(action string) {
	if a != nil && a.shared != nil {
		a.shared.metrics.RecoveryRead(action)
	}
}
