package caddymodule

import (
	"sort"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/holdout"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// holdoutStats is the measured effect of the gateway, arm against arm,
// from the ledger's records (the stats' "holdout" object; nil when no
// record is in an arm).
//
// The unit of "raw prompt" is the body bytes the client sent: both arms
// measure them the same way, before any compile, on every request (a
// token count exists only where the gate measured one). Savings is a
// ratio of the two arms' billed cost per raw byte, so any factor that
// turns bytes into tokens the same way in both arms (the arms are drawn
// at random from the same clients and models) cancels.
type holdoutStats struct {
	Arms    []armStats                 `json:"arms"`
	Savings holdoutInterval            `json:"savings"`
	Harm    map[string]holdoutInterval `json:"harm"`
	// By tenant label (the tenant id where no label matched) and by model
	// family (of the conversation's first request).
	Tenants []holdoutGroup `json:"tenants"`
	Models  []holdoutGroup `json:"models"`
	// Series: each arm's billed cost per raw byte over time, for the plot:
	// per UTC hour when the records span less than three days, else per
	// UTC day (Bucket).
	Bucket string         `json:"bucket"`
	Series []holdoutPoint `json:"series"`
	// MinConversations is the fewest conversations per arm for an
	// interval; below it Enough is false.
	MinConversations int `json:"min_conversations"`
}

type armStats struct {
	Arm           string  `json:"arm"`
	Conversations int     `json:"conversations"`
	Requests      int64   `json:"requests"`
	RawBytes      int64   `json:"raw_bytes"`
	CostActual    float64 `json:"cost_actual"` // billed input cost, base-input-token units
	CostPerRaw    float64 `json:"cost_per_raw_byte"`
	// Money, when every record of the arm was priced (stats.Currency).
	CostActualMoney float64 `json:"cost_actual_money,omitempty"`
	// Control only: requests whose shadow compile ran, and those shed
	// under load.
	ShadowCompiled int64 `json:"shadow_compiled,omitempty"`
	ShadowSkipped  int64 `json:"shadow_skipped,omitempty"`
	// What the shadow compiles would have sent, as expected cost: the
	// counterfactual, never a measurement.
	ShadowCostRaw  float64 `json:"shadow_cost_raw,omitempty"`
	ShadowCostSent float64 `json:"shadow_cost_sent,omitempty"`
}

// holdoutInterval is a point estimate and its 95% interval; Enough is
// false (and the numbers absent) when either arm has too few
// conversations.
type holdoutInterval struct {
	Enough bool     `json:"enough"`
	Point  *float64 `json:"point,omitempty"`
	Low    *float64 `json:"low,omitempty"`
	High   *float64 `json:"high,omitempty"`
}

func intervalOf(i holdout.Interval) holdoutInterval {
	if !i.Enough {
		return holdoutInterval{}
	}
	return holdoutInterval{Enough: true, Point: &i.Point, Low: &i.Low, High: &i.High}
}

type holdoutGroup struct {
	Key       string          `json:"key"`
	Treatment int             `json:"treatment"`
	Control   int             `json:"control"`
	Savings   holdoutInterval `json:"savings"`
}

type holdoutPoint struct {
	At        string   `json:"at"` // RFC 3339, the bucket's start
	Treatment *float64 `json:"treatment,omitempty"`
	Control   *float64 `json:"control,omitempty"`
}

// holdoutConversations sums the records in an arm per conversation. The
// cost and raw bytes of a request count only when its answer carried
// usage (a request the provider billed), in both arms alike; the harm
// signals count every request.
func holdoutConversations(recs []vault.LedgerRecord) []holdout.Conversation {
	type acc struct {
		c     holdout.Conversation
		first int64
	}
	byConv := map[string]*acc{}
	for i := range recs {
		r := &recs[i]
		if r.Arm == "" || r.Conversation == "" {
			continue
		}
		a := byConv[r.Conversation]
		if a == nil {
			a = &acc{first: r.Time}
			a.c.Arm = holdout.Treatment
			if r.Arm == holdout.Control.String() {
				a.c.Arm = holdout.Control
			}
			a.c.Tenant, a.c.Model = r.TenantLabel, r.Model
			if a.c.Tenant == "" {
				a.c.Tenant = r.Tenant
			}
			byConv[r.Conversation] = a
		}
		if r.Time < a.first {
			a.first, a.c.Model = r.Time, r.Model
		}
		c := &a.c
		c.Requests++
		if u := r.Usage; u != nil {
			c.Billed += u.Cost
			c.RawPrompt += float64(r.RawBytes)
			c.OutputTokens += float64(u.Output)
			c.RecoveryRounds += float64(u.RecoveryRounds)
		}
		if r.Status == 0 || r.Status >= 400 {
			c.Errors++
		}
		if r.Retry {
			c.Retries++
		}
	}
	keys := make([]string, 0, len(byConv))
	for k := range byConv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]holdout.Conversation, 0, len(keys))
	for _, k := range keys {
		out = append(out, byConv[k].c)
	}
	return out
}

// summarizeHoldout is the stats' holdout object; nil when no record is
// in an arm.
func summarizeHoldout(recs []vault.LedgerRecord, currency string) *holdoutStats {
	convs := holdoutConversations(recs)
	if len(convs) == 0 {
		return nil
	}
	min := holdout.DefaultMinConversations
	est := holdout.Measure(convs, min)
	hs := &holdoutStats{Savings: intervalOf(est.Savings), Harm: map[string]holdoutInterval{}, MinConversations: min}
	for _, h := range holdout.Harms {
		hs.Harm[h.Name] = intervalOf(est.Harm[h.Name])
	}
	arms := []armStats{{Arm: holdout.Treatment.String(), Conversations: est.Treatment}, {Arm: holdout.Control.String(), Conversations: est.Control}}
	var bucket time.Duration
	bucket, hs.Bucket = holdoutBucket(recs)
	days := tallyArms(recs, arms, bucket)
	for i := range arms {
		if arms[i].RawBytes > 0 {
			arms[i].CostPerRaw = arms[i].CostActual / float64(arms[i].RawBytes)
		}
		if currency == "" {
			arms[i].CostActualMoney = 0
		}
	}
	hs.Arms = arms
	hs.Tenants = holdoutGroups(convs, func(c holdout.Conversation) string { return c.Tenant }, min)
	hs.Models = holdoutGroups(convs, func(c holdout.Conversation) string { return c.Model }, min)
	hs.Series = holdoutSeries(days)
	return hs
}

// holdoutBucket is the width of the series' points and its name: an hour,
// or a day once the records in an arm span 72 hours or more.
func holdoutBucket(recs []vault.LedgerRecord) (time.Duration, string) {
	var lo, hi int64
	for i := range recs {
		if t := recs[i].Time; recs[i].Arm != "" {
			if lo == 0 || t < lo {
				lo = t
			}
			hi = max(hi, t)
		}
	}
	if time.Duration(hi-lo)*time.Millisecond >= 72*time.Hour {
		return 24 * time.Hour, "day"
	}
	return time.Hour, "hour"
}

// holdoutDay is one series point being summed: billed cost and raw bytes
// per arm (treatment, control).
type holdoutDay struct{ billed, raw [2]float64 }

// tallyArms adds the records of a conversation in an arm to arms
// (treatment, control) and returns their billed cost and raw bytes per
// bucket, keyed by the bucket's start.
func tallyArms(recs []vault.LedgerRecord, arms []armStats, bucket time.Duration) map[string]*holdoutDay {
	days := map[string]*holdoutDay{}
	for i := range recs {
		r := &recs[i]
		if r.Arm == "" || r.Conversation == "" {
			continue
		}
		k := 0
		if r.Arm == holdout.Control.String() {
			k = 1
		}
		a := &arms[k]
		a.Requests++
		if k == 1 {
			if r.ShadowSkipped {
				a.ShadowSkipped++
			} else if r.Reason == string(compiler.ReasonHoldout) {
				a.ShadowCompiled++
				a.ShadowCostRaw += r.CostRaw
				a.ShadowCostSent += r.ShadowCostSent
			}
		}
		if u := r.Usage; u != nil {
			a.RawBytes += r.RawBytes
			a.CostActual += u.Cost
			a.CostActualMoney += u.Cost * r.Price
			day := time.UnixMilli(r.Time).UTC().Truncate(bucket).Format(time.RFC3339)
			d := days[day]
			if d == nil {
				d = &holdoutDay{}
				days[day] = d
			}
			d.billed[k] += u.Cost
			d.raw[k] += float64(r.RawBytes)
		}
	}
	return days
}

// holdoutGroups measures the conversations grouped by key.
func holdoutGroups(convs []holdout.Conversation, key func(holdout.Conversation) string, min int) []holdoutGroup {
	var out []holdoutGroup
	for _, g := range holdout.MeasureBy(convs, key, min) {
		out = append(out, holdoutGroup{Key: g.Key, Treatment: g.Treatment, Control: g.Control, Savings: intervalOf(g.Savings)})
	}
	return out
}

// holdoutSeries is the billed cost per raw byte of each arm per bucket, in
// time order; an arm with no raw bytes in a bucket has no value there.
func holdoutSeries(days map[string]*holdoutDay) []holdoutPoint {
	var out []holdoutPoint
	for day, d := range days {
		hd := holdoutPoint{At: day}
		if d.raw[0] > 0 {
			v := d.billed[0] / d.raw[0]
			hd.Treatment = &v
		}
		if d.raw[1] > 0 {
			v := d.billed[1] / d.raw[1]
			hd.Control = &v
		}
		out = append(out, hd)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}
