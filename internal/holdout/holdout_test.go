package holdout

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func TestParseShare(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Share
		ok   bool
	}{
		{"5%", 500, true}, {"5", 500, true}, {"0.5%", 50, true}, {"0", 0, true},
		{"100%", 10000, true}, {" 12.25% ", 1225, true},
		{"-1%", 0, false}, {"101", 0, false}, {"0.001%", 0, false}, {"five", 0, false}, {"NaN", 0, false}, {"", 0, false},
	} {
		got, err := ParseShare(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseShare(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestAssignerShareAndStability(t *testing.T) {
	key := []byte("fleet secret")
	for _, share := range []Share{0, 500, 5000, 10000} {
		a, again := NewAssigner(key, share), NewAssigner(key, share)
		n, control := 50000, 0
		for i := range n {
			conv := fmt.Sprintf("c_%d", i)
			arm := a.Arm("tenant", conv)
			if arm != again.Arm("tenant", conv) {
				t.Fatalf("share %d: %s changed arm between two assigners with one key", share, conv)
			}
			if arm == Control {
				control++
			}
		}
		want := float64(share) / basisPoints
		got := float64(control) / float64(n)
		if math.Abs(got-want) > 4*math.Sqrt(want*(1-want)/float64(n))+1e-12 {
			t.Errorf("share %d: %.4f of conversations in control, want %.4f", share, got, want)
		}
	}
}

func TestAssignerKeyedAndScoped(t *testing.T) {
	a, b := NewAssigner([]byte("k1"), 5000), NewAssigner([]byte("k2"), 5000)
	differKey, differTenant := 0, 0
	for i := range 1000 {
		conv := fmt.Sprintf("c_%d", i)
		if a.Arm("t", conv) != b.Arm("t", conv) {
			differKey++
		}
		if a.Arm("t1", conv) != a.Arm("t2", conv) {
			differTenant++
		}
	}
	// Independent halves disagree about half the time.
	for name, d := range map[string]int{"key": differKey, "tenant": differTenant} {
		if d < 400 || d > 600 {
			t.Errorf("changing the %s changed %d of 1000 arms; want about 500", name, d)
		}
	}
	if NewAssigner([]byte("k"), 10000).Arm("t", "") != Treatment {
		t.Error("a request without a conversation key was held out")
	}
	var nilAssigner *Assigner
	if nilAssigner.Arm("t", "c") != Treatment {
		t.Error("a nil assigner held a conversation out")
	}
}

// synthetic draws conversations whose true savings (treatment's cost per raw
// prompt token over control's) is 1−ratio, and whose requests per
// conversation differ by harm on average.
func synthetic(rng *rand.Rand, n int, ratio, harm float64) []Conversation {
	out := make([]Conversation, 0, 2*n)
	for i := range 2 * n {
		arm := Treatment
		if i%2 == 1 {
			arm = Control
		}
		raw := math.Exp(rng.NormFloat64()*0.8 + 10)          // prompt sizes vary by ~e^0.8
		noise := math.Exp(rng.NormFloat64()*0.5 - 0.5*0.5/2) // mean 1, same in both arms
		billed := raw * 0.4 * noise
		reqs := 10 + rng.NormFloat64()*3
		if arm == Treatment {
			billed *= ratio
			reqs += harm
		}
		out = append(out, Conversation{Arm: arm, RawPrompt: raw, Billed: billed, Requests: reqs})
	}
	return out
}

// TestIntervalCoverage checks the intervals cover the true effect at their
// stated 95% rate over many seeds: the test fails if the estimator is
// biased or its variance is wrong in either direction.
func TestIntervalCoverage(t *testing.T) {
	const seeds, n = 2000, 60
	trueSavings, trueHarm := 0.3, 0.5
	coveredS, coveredH := 0, 0
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		e := Measure(synthetic(rng, n, 1-trueSavings, trueHarm), 0)
		if !e.Savings.Enough || e.Treatment != n || e.Control != n {
			t.Fatalf("seed %d: %+v", seed, e)
		}
		if e.Savings.Low <= trueSavings && trueSavings <= e.Savings.High {
			coveredS++
		}
		h := e.Harm["requests"]
		if h.Low <= trueHarm && trueHarm <= h.High {
			coveredH++
		}
		if !(e.Savings.Low < e.Savings.Point && e.Savings.Point < e.Savings.High) {
			t.Fatalf("seed %d: point %v outside its interval [%v, %v]", seed, e.Savings.Point, e.Savings.Low, e.Savings.High)
		}
	}
	for name, c := range map[string]int{"savings": coveredS, "harm": coveredH} {
		rate := float64(c) / seeds
		t.Logf("%s: interval covered the truth in %.3f of %d seeds", name, rate, seeds)
		if rate < 0.93 || rate > 0.97 {
			t.Errorf("%s coverage %.3f, want 0.95 ± 0.02", name, rate)
		}
	}
}

func TestExactWithoutNoise(t *testing.T) {
	var cs []Conversation
	for i := range 40 {
		raw := float64(1000 + 100*i)
		cs = append(cs,
			Conversation{Arm: Control, RawPrompt: raw, Billed: raw * 0.5, Requests: 4},
			Conversation{Arm: Treatment, RawPrompt: raw, Billed: raw * 0.5 * 0.8, Requests: 5})
	}
	e := Measure(cs, 0)
	if math.Abs(e.Savings.Point-0.2) > 1e-12 || math.Abs(e.Savings.High-e.Savings.Low) > 1e-9 {
		t.Errorf("savings %+v, want exactly 0.2 with a zero-width interval", e.Savings)
	}
	if h := e.Harm["requests"]; math.Abs(h.Point-1) > 1e-12 {
		t.Errorf("requests harm %+v, want +1", h)
	}
}

func TestTooLittleData(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cs := synthetic(rng, 29, 0.7, 0)
	e := Measure(cs, 30)
	if e.Savings.Enough || e.Savings != (Interval{}) || e.Harm["requests"].Enough {
		t.Errorf("29 conversations per arm reported %+v", e)
	}
	if !Measure(cs, 29).Savings.Enough {
		t.Error("29 per arm with a minimum of 29 reported not enough")
	}
	if e := Measure(nil, 0); e.Savings.Enough || e.Treatment != 0 {
		t.Errorf("no data: %+v", e)
	}
	// A control arm that billed nothing cannot be divided by.
	zero := []Conversation{}
	for range 40 {
		zero = append(zero, Conversation{Arm: Control, RawPrompt: 10}, Conversation{Arm: Treatment, RawPrompt: 10, Billed: 1})
	}
	if Measure(zero, 0).Savings.Enough {
		t.Error("a control arm with zero cost produced a savings interval")
	}
}

func TestMeasureBy(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	a := synthetic(rng, 60, 0.5, 0)
	b := synthetic(rng, 10, 0.9, 0)
	for i := range a {
		a[i].Tenant = "a"
	}
	for i := range b {
		b[i].Tenant = "b"
	}
	groups := MeasureBy(append(a, b...), func(c Conversation) string { return c.Tenant }, 0)
	if len(groups) != 2 || groups[0].Key != "a" || groups[1].Key != "b" {
		t.Fatalf("groups %+v", groups)
	}
	if g := groups[0]; !g.Savings.Enough || g.Savings.Low > 0.5 || g.Savings.High < 0.5 {
		t.Errorf("tenant a: %+v, want an interval around 0.5", g.Savings)
	}
	if groups[1].Savings.Enough {
		t.Error("tenant b has 10 conversations per arm and still got an interval")
	}
}

func TestT95(t *testing.T) {
	// Exact two-sided 95% quantiles of Student's t.
	for df, want := range map[float64]float64{3: 3.182, 5: 2.571, 10: 2.228, 29: 2.045, 100: 1.984, 1e9: 1.960} {
		if got := t95(df); math.Abs(got-want) > 0.01*want {
			t.Errorf("t95(%v) = %.4f, want %.3f", df, got, want)
		}
	}
}
