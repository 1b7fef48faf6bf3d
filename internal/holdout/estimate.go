package holdout

import (
	"math"
	"sort"
)

// Conversation is what one conversation billed and did, summed over its
// requests. Costs are in the cost model's units (base input tokens or a
// currency); they only need to be the same units in both arms.
type Conversation struct {
	Arm    Arm
	Tenant string // tenant label, for the per-tenant breakdown
	Model  string // model family of the conversation's first request

	// RawPrompt is the prompt the client itself sent, summed over the
	// conversation's requests: the unit savings are measured per, so that
	// conversations of different lengths weigh by their size and the arms
	// compare like with like. Any unit both arms measure the same way on
	// every request will do (the gateway uses the client's body bytes):
	// savings is a ratio of the arms, so a conversion factor common to
	// both cancels.
	RawPrompt float64
	// Billed is the provider's billed usage of every answer (input, cache
	// reads, cache writes and output), priced by the cost model.
	Billed float64

	// Harm signals.
	Requests       float64 // requests the conversation took
	RecoveryRounds float64 // recovery-tool rounds the gateway ran
	OutputTokens   float64 // billed output tokens
	Errors         float64 // provider answers with a 4xx/5xx status
	Retries        float64 // requests that resent the previous body unchanged
}

// Harm names one harm signal and reads it from a conversation.
type Harm struct {
	Name string
	Of   func(Conversation) float64
}

// Harms are the harm signals every estimate reports, in display order.
var Harms = []Harm{
	{"requests", func(c Conversation) float64 { return c.Requests }},
	{"recovery_rounds", func(c Conversation) float64 { return c.RecoveryRounds }},
	{"output_tokens", func(c Conversation) float64 { return c.OutputTokens }},
	{"errors", func(c Conversation) float64 { return c.Errors }},
	{"retries", func(c Conversation) float64 { return c.Retries }},
}

// Interval is a point estimate with its two-sided 95% confidence interval.
// Enough is false when either arm has fewer conversations than the
// estimate's minimum: the other fields are then zero and a report says
// "not enough data" instead of a number.
type Interval struct {
	Point, Low, High float64
	Enough           bool
}

// z95 is the standard normal quantile for a two-sided 95% interval.
const z95 = 1.959963984540054

// DefaultMinConversations is the fewest conversations per arm for which an
// interval is reported. Below it the normal approximation the intervals
// rest on is not trustworthy for skewed costs.
const DefaultMinConversations = 30

// Estimate is the measured effect of the gateway over one set of
// conversations.
type Estimate struct {
	Treatment, Control int // conversations per arm

	// CostPerRaw is billed cost per raw prompt token in each arm.
	CostPerRawTreatment, CostPerRawControl float64

	// Savings is 1 − (treatment's cost per raw prompt token) / (control's):
	// 0.25 means treatment bills 25% less for the same prompts.
	Savings Interval

	// Harm holds, per signal of Harms, treatment's mean per conversation
	// minus control's (positive: treatment has more of it).
	Harm map[string]Interval
}

// Measure estimates savings and harm from the conversations. min is the
// fewest conversations per arm for an interval (DefaultMinConversations
// when ≤ 0).
//
// Savings is a ratio of ratio estimators: each arm's cost per raw prompt
// token is ΣBilled/ΣRawPrompt over its conversations, with the
// conversation as the sampling unit (requests of one conversation share a
// cache and are not independent). The interval is built on the log of the
// ratio of the two arms (jackknife variance per arm, Student's t with the
// smaller arm's degrees of freedom) and mapped back, which keeps it
// asymmetric and inside (−∞, 1). Harm signals are differences of means
// per conversation with Welch's unequal-variance t interval.
func Measure(convs []Conversation, min int) Estimate {
	if min <= 0 {
		min = DefaultMinConversations
	}
	var t, c []Conversation
	for _, cv := range convs {
		if cv.Arm == Control {
			c = append(c, cv)
		} else {
			t = append(t, cv)
		}
	}
	e := Estimate{Treatment: len(t), Control: len(c), Harm: make(map[string]Interval, len(Harms))}
	rt, vt := logRatio(t)
	rc, vc := logRatio(c)
	e.CostPerRawTreatment, e.CostPerRawControl = rt, rc
	enough := len(t) >= min && len(c) >= min
	if enough && rt > 0 && rc > 0 {
		lr := math.Log(rt / rc)
		se := math.Sqrt(vt + vc)
		q := t95(float64(min2(len(t), len(c)) - 1))
		e.Savings = Interval{
			Point:  1 - rt/rc,
			Low:    1 - math.Exp(lr+q*se),
			High:   1 - math.Exp(lr-q*se),
			Enough: true,
		}
	}
	for _, h := range Harms {
		if !enough {
			e.Harm[h.Name] = Interval{}
			continue
		}
		mt, st := meanVar(t, h.Of)
		mc, sc := meanVar(c, h.Of)
		d := mt - mc
		at, ac := st/float64(len(t)), sc/float64(len(c))
		se := math.Sqrt(at + ac)
		q := t95(welchDF(at, ac, len(t), len(c)))
		e.Harm[h.Name] = Interval{Point: d, Low: d - q*se, High: d + q*se, Enough: true}
	}
	return e
}

// MeasureBy splits the conversations by key (tenant, model family, …) and
// measures each group; groups are returned in key order.
func MeasureBy(convs []Conversation, key func(Conversation) string, min int) []Group {
	byKey := map[string][]Conversation{}
	for _, c := range convs {
		k := key(c)
		byKey[k] = append(byKey[k], c)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]Group, 0, len(keys))
	for _, k := range keys {
		out = append(out, Group{Key: k, Estimate: Measure(byKey[k], min)})
	}
	return out
}

// Group is the estimate of one group of MeasureBy.
type Group struct {
	Key string
	Estimate
}

// logRatio is the ratio estimator ΣBilled/ΣRawPrompt and the jackknife
// variance of its logarithm, with conversations as clusters (leave one
// conversation out at a time). The jackknife is used rather than the
// delta method's linearisation because per-conversation costs are skewed
// (a few long conversations dominate), where the linearised variance is
// too small for the sample sizes a holdout sees and its interval covers
// the truth less often than it claims.
func logRatio(cs []Conversation) (r, v float64) {
	n := float64(len(cs))
	if n < 2 {
		return 0, 0
	}
	var sb, sr float64
	for _, c := range cs {
		sb += c.Billed
		sr += c.RawPrompt
	}
	if sr <= 0 || sb <= 0 {
		return 0, 0
	}
	r = sb / sr
	loo := make([]float64, 0, len(cs))
	var mean float64
	for _, c := range cs {
		b, p := sb-c.Billed, sr-c.RawPrompt
		if b <= 0 || p <= 0 {
			// One conversation carries all the cost: no spread can be
			// estimated, so no interval either.
			return 0, 0
		}
		x := math.Log(b / p)
		loo = append(loo, x)
		mean += x
	}
	mean /= n
	for _, x := range loo {
		v += (x - mean) * (x - mean)
	}
	return r, v * (n - 1) / n
}

// meanVar is the mean and the sample variance of f over cs.
func meanVar(cs []Conversation, f func(Conversation) float64) (mean, variance float64) {
	n := float64(len(cs))
	if n == 0 {
		return 0, 0
	}
	for _, c := range cs {
		mean += f(c)
	}
	mean /= n
	if n < 2 {
		return mean, 0
	}
	for _, c := range cs {
		d := f(c) - mean
		variance += d * d
	}
	return mean, variance / (n - 1)
}

func min2(a, b int) int {
	if a < b {
		return a
	}
	return b
}

// t95 is Student's t quantile for a two-sided 95% interval with df degrees
// of freedom (Cornish–Fisher expansion around the normal quantile; within
// 1% of the exact value from 3 degrees of freedom up, 0.1% from 10). Small arms get
// the wider interval their few conversations warrant.
func t95(df float64) float64 {
	z := z95
	if df < 3 || math.IsNaN(df) {
		df = 3
	}
	z3, z5, z7 := z*z*z, z*z*z*z*z, z*z*z*z*z*z*z
	return z + (z3+z)/(4*df) + (5*z5+16*z3+3*z)/(96*df*df) + (3*z7+19*z5+17*z3-15*z)/(384*df*df*df)
}

// welchDF is the Welch–Satterthwaite degrees of freedom of a difference of
// two means with squared standard errors a and b.
func welchDF(a, b float64, na, nb int) float64 {
	den := a*a/float64(na-1) + b*b/float64(nb-1)
	if den == 0 {
		return float64(na + nb - 2)
	}
	return (a + b) * (a + b) / den
}
