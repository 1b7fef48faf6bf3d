package caddymodule

import (
	"sort"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// savings adds up ledger records. Saved bytes and tokens count accepted
// rewrites only: a pass-through or a shadow compile forwarded the
// original. The cost figures are the records' own (cost_sent is of what
// went; a shadow record's is what would have gone).
type savings struct {
	Requests   int64   `json:"requests"`
	Accepted   int64   `json:"accepted"`
	RawBytes   int64   `json:"raw_bytes"`
	SentBytes  int64   `json:"sent_bytes"`
	SavedBytes int64   `json:"saved_bytes"`
	RawTokens  int64   `json:"raw_tokens"`
	SentTokens int64   `json:"sent_tokens"`
	SavedTok   int64   `json:"saved_tokens"`
	CostRaw    float64 `json:"cost_raw"`
	CostSent   float64 `json:"cost_sent"`
	CostSaved  float64 `json:"cost_saved"`
	// The same over each decision's horizon: the saving net of what the
	// rewrites did to the provider's cache on the following requests.
	CostHorizonRaw   float64 `json:"cost_horizon_raw"`
	CostHorizonSent  float64 `json:"cost_horizon_sent"`
	CostHorizonSaved float64 `json:"cost_horizon_saved"`
	// What the provider reported billing, where its answer carried usage:
	// input tokens by how they were billed, and their price (cost_actual).
	UsageRequests   int64   `json:"usage_requests"`
	UsageUncached   int64   `json:"usage_uncached_tokens"`
	UsageCacheRead  int64   `json:"usage_cache_read_tokens"`
	UsageCacheWrite int64   `json:"usage_cache_write_tokens"`
	CostActual      float64 `json:"cost_actual"`
	// The requests with both usage and expected figures (and no recovery
	// rounds, whose usage sums several upstream requests), like for like:
	// their reported cost and their expected cost_sent.
	JudgedRequests     int64   `json:"judged_requests"`
	CostActualJudged   float64 `json:"cost_actual_judged"`
	CostExpectedJudged float64 `json:"cost_expected_judged"`
	Receipts           int64   `json:"receipts"`
	Folded             int64   `json:"folded"`
	// The cost figures as money, from the records' prices; meaningful
	// when stats.Currency is set (every judged record priced in it).
	CostRawMoney            float64 `json:"cost_raw_money,omitempty"`
	CostSavedMoney          float64 `json:"cost_saved_money,omitempty"`
	CostActualMoney         float64 `json:"cost_actual_money,omitempty"`
	CostActualJudgedMoney   float64 `json:"cost_actual_judged_money,omitempty"`
	CostExpectedJudgedMoney float64 `json:"cost_expected_judged_money,omitempty"`
}

func (s *savings) add(r *vault.LedgerRecord) {
	s.Requests++
	s.RawBytes += r.RawBytes
	s.RawTokens += int64(r.RawTokens)
	s.CostRaw += r.CostRaw
	if r.Decision == string(compiler.Accepted) {
		s.Accepted++
		s.SentBytes += r.SentBytes
		s.SentTokens += int64(r.SentTokens)
		s.Receipts += int64(r.Receipts)
		s.Folded += int64(r.Folded)
	} else {
		s.SentBytes += r.RawBytes
		s.SentTokens += int64(r.RawTokens)
	}
	if r.CostRaw > 0 {
		// CostSent is of what went: the original on pass-through.
		s.CostSent += r.CostSent
		s.CostRawMoney += r.CostRaw * r.Price
		s.CostSavedMoney += (r.CostRaw - r.CostSent) * r.Price
	}
	s.CostHorizonRaw += r.CostHorizonRaw
	s.CostHorizonSent += r.CostHorizonSent
	if u := r.Usage; u != nil {
		s.UsageRequests++
		s.UsageUncached += int64(u.Uncached)
		s.UsageCacheRead += int64(u.CacheRead)
		s.UsageCacheWrite += int64(u.CacheWrite)
		s.CostActual += u.Cost
		s.CostActualMoney += u.Cost * r.Price
		if r.CostRaw > 0 && u.RecoveryRounds == 0 {
			// The expected figures are of one request; recovery rounds'
			// usage sums several.
			s.JudgedRequests++
			s.CostActualJudged += u.Cost
			s.CostExpectedJudged += r.CostSent
			s.CostActualJudgedMoney += u.Cost * r.Price
			s.CostExpectedJudgedMoney += r.CostSent * r.Price
		}
	}
	s.SavedBytes = s.RawBytes - s.SentBytes
	s.SavedTok = s.RawTokens - s.SentTokens
	s.CostSaved = s.CostRaw - s.CostSent
	s.CostHorizonSaved = s.CostHorizonRaw - s.CostHorizonSent
}

type tenantSavings struct {
	Tenant string `json:"tenant"`
	Label  string `json:"label,omitempty"`
	savings
}

type modelSavings struct {
	Model string `json:"model"`
	savings
}

type daySavings struct {
	Day string `json:"day"` // UTC, YYYY-MM-DD
	savings
}

type conversationSavings struct {
	Conversation string `json:"conversation"`
	Tenant       string `json:"tenant,omitempty"`
	Label        string `json:"label,omitempty"`
	savings
}

// stats is the answer of GET /token-terminator/stats.
type stats struct {
	Since         int64                 `json:"since,omitempty"`
	Until         int64                 `json:"until,omitempty"`
	Totals        savings               `json:"totals"`
	Decisions     map[string]int64      `json:"decisions"`
	Reasons       map[string]int64      `json:"reasons"`
	Tenants       []tenantSavings       `json:"tenants"`
	Models        []modelSavings        `json:"models"`
	Days          []daySavings          `json:"days"`
	Conversations []conversationSavings `json:"top_conversations"`
	Vault         *vaultSummary         `json:"vault,omitempty"`
	// Currency of the *_money figures: set only when every record with
	// cost figures or usage was priced, all in this one currency (a
	// partly priced sum would be no total); "" otherwise.
	Currency string `json:"currency,omitempty"`
	// Holdout is the measured effect, arm against arm (holdout_stats.go);
	// absent when no record is in an arm.
	Holdout *holdoutStats `json:"holdout,omitempty"`
}

// summarize adds up records: totals, per tenant and model family (most
// saved first), per UTC day (oldest first) and the conversations that
// saved the most bytes.
func summarize(recs []vault.LedgerRecord) stats {
	st := stats{Decisions: map[string]int64{}, Reasons: map[string]int64{}}
	tenants := map[string]*tenantSavings{}
	models := map[string]*modelSavings{}
	days := map[string]*daySavings{}
	convs := map[string]*conversationSavings{}
	currency, priced := "", true
	for i := range recs {
		r := &recs[i]
		if r.CostRaw > 0 || r.Usage != nil {
			switch {
			case r.Price <= 0 || r.Currency == "" || (currency != "" && r.Currency != currency):
				priced = false
			default:
				currency = r.Currency
			}
		}
		st.Totals.add(r)
		st.Decisions[r.Decision]++
		if r.Reason != "" {
			st.Reasons[r.Reason]++
		}
		t := tenants[r.Tenant]
		if t == nil {
			t = &tenantSavings{Tenant: r.Tenant}
			tenants[r.Tenant] = t
		}
		if r.TenantLabel != "" {
			t.Label = r.TenantLabel
		}
		t.add(r)
		m := models[r.Model]
		if m == nil {
			m = &modelSavings{Model: r.Model}
			models[r.Model] = m
		}
		m.add(r)
		day := time.UnixMilli(r.Time).UTC().Format(time.DateOnly)
		d := days[day]
		if d == nil {
			d = &daySavings{Day: day}
			days[day] = d
		}
		d.add(r)
		if r.Conversation != "" {
			c := convs[r.Conversation]
			if c == nil {
				c = &conversationSavings{Conversation: r.Conversation, Tenant: r.Tenant}
				convs[r.Conversation] = c
			}
			if r.TenantLabel != "" {
				c.Label = r.TenantLabel
			}
			c.add(r)
		}
	}
	st.Tenants = sortedBySaved(tenants, func(a *tenantSavings) (*savings, string) { return &a.savings, a.Tenant })
	st.Models = sortedBySaved(models, func(a *modelSavings) (*savings, string) { return &a.savings, a.Model })
	st.Conversations = sortedBySaved(convs, func(a *conversationSavings) (*savings, string) { return &a.savings, a.Conversation })
	if len(st.Conversations) > topConversations {
		st.Conversations = st.Conversations[:topConversations]
	}
	st.Days = make([]daySavings, 0, len(days))
	for _, d := range days {
		st.Days = append(st.Days, *d)
	}
	sort.Slice(st.Days, func(i, j int) bool { return st.Days[i].Day < st.Days[j].Day })
	if priced {
		st.Currency = currency
	}
	st.Holdout = summarizeHoldout(recs, st.Currency)
	return st
}

// sortedBySaved lists m by saved bytes, most first, ties by key, so the
// answer is deterministic.
func sortedBySaved[T any](m map[string]*T, of func(*T) (*savings, string)) []T {
	out := make([]*T, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool {
		a, ka := of(out[i])
		b, kb := of(out[j])
		if a.SavedBytes != b.SavedBytes {
			return a.SavedBytes > b.SavedBytes
		}
		return ka < kb
	})
	res := make([]T, len(out))
	for i, v := range out {
		res[i] = *v
	}
	return res
}
