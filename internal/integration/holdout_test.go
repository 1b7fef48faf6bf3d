package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/fakeprovider"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/redisvault/redistest"
)

// holdoutTenantKey fixes the assignment (a key derived from it), so the
// split of the generated sessions is the same on every run: the interval
// check is one draw, not a test that fails one run in twenty. The
// estimator's coverage over many draws is internal/holdout's test.
const holdoutTenantKey = "holdout-tenant-key-0123456789abcdef"

// holdoutSnippet is the savings page beside a gateway holding out share
// of its conversations.
func holdoutSnippet(share string) string {
	return `
	handle /tt-savings/* {
		token_terminator_savings
	}
	handle {
		token_terminator {
			vault_dir $VAULT
			tenant_key ` + holdoutTenantKey + `
			holdout ` + share + `
		}
		reverse_proxy $UPSTREAM
	}
`
}

// fakeUpstream makes up answer every request as the fake provider does:
// usage with a simulated prompt cache per credential and model. reset
// starts a new provider (a cold cache).
func fakeUpstream(up *upstream) (reset func()) {
	var mu sync.Mutex
	p := &fakeprovider.Provider{}
	up.respond = func(n int, w http.ResponseWriter) bool {
		up.mu.Lock()
		rec := up.reqs[n]
		up.mu.Unlock()
		r := httptest.NewRequest(rec.Method, rec.Path, bytes.NewReader(rec.Body))
		r.Header = rec.Header.Clone()
		mu.Lock()
		cur := p
		mu.Unlock()
		cur.ServeHTTP(w, r)
		return true
	}
	return func() {
		mu.Lock()
		p = &fakeprovider.Provider{}
		mu.Unlock()
	}
}

// holdoutConversation is one generated conversation: its tenant's
// credential header and its requests, each the whole history so far.
type holdoutConversation struct {
	auth  string
	path  string
	steps [][]byte
}

// holdoutSessions generates conversations of several tenants in two
// formats (each tenant one credential per format: two tenant ids), of
// different lengths and result sizes, each opening with its
// own first question (the conversation key).
func holdoutSessions(tenants, perTenant int) []holdoutConversation {
	var out []holdoutConversation
	for tn := 0; tn < tenants; tn++ {
		for c := 0; c < perTenant; c++ {
			seed := 1000*tn + 37*c
			n := 2 + (c*7+tn)%6            // 2..7 tool turns
			size := 3000 + 1500*((c+tn)%5) // 3000..9000 chars
			turns := fixtures.Turns(seed, n, size)
			question := []byte(fmt.Sprintf("Fix the failing test %d-%d.", tn, c))
			hc := holdoutConversation{auth: fmt.Sprintf("Authorization: Bearer sk-holdout-tenant-%d", tn), path: "/v1/chat/completions"}
			anth := c%2 == 1
			if anth {
				hc.auth = fmt.Sprintf("X-Api-Key: sk-holdout-tenant-%d", tn)
				hc.path = "/v1/messages"
			}
			for i := 0; i <= n; i++ {
				var b []byte
				if anth {
					b = fixtures.AnthropicBody("claude-sonnet-4-5", turns[:i], "", fixtures.AnthropicOptions{System: true, CacheLast: true})
				} else {
					b = fixtures.ChatBody("gpt-4o", turns[:i], "")
				}
				hc.steps = append(hc.steps, bytes.Replace(b, []byte("Fix the failing test."), question, 1))
			}
			out = append(out, hc)
		}
	}
	return out
}

// holdoutRun sends every conversation through g and returns each
// conversation's arm as the gateway reported it (control: the
// Token-Terminator header says passthrough=holdout on every request).
// Every control request must reach the provider byte for byte as sent.
func holdoutRun(t *testing.T, g *gateway, up *upstream, convs []holdoutConversation) []bool {
	t.Helper()
	verified := map[string]bool{}
	control := make([]bool, len(convs))
	own, verifications := g.accounted()
	for ci, c := range convs {
		if k := c.path + c.auth; !verified[k] {
			verified[k] = true
			g.verify(c.path, c.auth)
		}
		own += len(c.steps)
		for si, body := range c.steps {
			r := g.post(c.path, body, c.auth, "anthropic-version: 2023-06-01")
			if r.Status != http.StatusOK {
				t.Fatalf("conversation %d step %d: status %d", ci, si, r.Status)
			}
			isControl := strings.HasPrefix(r.TT, "passthrough=holdout")
			if si == 0 {
				control[ci] = isControl
			} else if isControl != control[ci] {
				t.Fatalf("conversation %d changed arm at request %d (%s)", ci, si, r.TT)
			}
			if isControl && !bytes.Equal(up.last(t).Body, body) {
				t.Fatalf("conversation %d request %d of the control arm was not forwarded as sent", ci, si)
			}
		}
	}
	g.waitAccounted(own, verifications) // the stats and metrics the caller reads
	return control
}

type holdoutInterval struct {
	Enough           bool
	Point, Low, High float64
}

type holdoutStatsJSON struct {
	Totals struct {
		CostActual    float64 `json:"cost_actual"`
		UsageRequests int     `json:"usage_requests"`
		RawBytes      int64   `json:"raw_bytes"`
	} `json:"totals"`
	Holdout *struct {
		Arms []struct {
			Arm            string  `json:"arm"`
			Conversations  int     `json:"conversations"`
			Requests       int     `json:"requests"`
			CostActual     float64 `json:"cost_actual"`
			ShadowCompiled int     `json:"shadow_compiled"`
			ShadowSkipped  int     `json:"shadow_skipped"`
		} `json:"arms"`
		Savings holdoutInterval            `json:"savings"`
		Harm    map[string]holdoutInterval `json:"harm"`
		Tenants []struct {
			Key                string
			Treatment, Control int
		} `json:"tenants"`
		Series []struct {
			At                 string
			Treatment, Control *float64
		} `json:"series"`
	} `json:"holdout"`
}

func readHoldoutStats(t *testing.T, o *observed) holdoutStatsJSON {
	t.Helper()
	var st holdoutStatsJSON
	if err := json.Unmarshal(o.adminGet("/token-terminator/stats"), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestHoldout_MeasuredSavings: generated sessions of several tenants
// through Caddy to a fake provider that prices a simulated prompt cache,
// with holdout 50%. Control conversations reach the provider byte for
// byte as the client sent them; a conversation never changes arm; the
// measured savings' 95% interval contains the truth of the same sessions
// (every conversation sent once all treated, once all as sent, each to a
// cold simulated cache: 1 − billed treated / billed raw); the arms are
// the same after a restart; the savings page shows the arms and the
// interval in headless Chromium.
func TestHoldout_MeasuredSavings(t *testing.T) {
	if testing.Short() {
		t.Skip("sends about two thousand requests")
	}
	convs := holdoutSessions(3, 36)
	up := newUpstream(t)
	resetProvider := fakeUpstream(up)

	o := startObserved(t, holdoutSnippet("50%"), up)
	arms := holdoutRun(t, o.gateway, up, convs)
	st := readHoldoutStats(t, o)
	h := st.Holdout
	if h == nil || len(h.Arms) != 2 {
		t.Fatalf("stats carry no holdout: %+v", st)
	}
	nControl := 0
	for _, c := range arms {
		if c {
			nControl++
		}
	}
	if h.Arms[0].Arm != "treatment" || h.Arms[1].Arm != "control" || h.Arms[1].Conversations != nControl || h.Arms[0].Conversations != len(convs)-nControl {
		t.Fatalf("arms %+v; the client saw %d control conversations of %d", h.Arms, nControl, len(convs))
	}
	if h.Arms[1].ShadowCompiled+h.Arms[1].ShadowSkipped != h.Arms[1].Requests || h.Arms[1].ShadowCompiled == 0 {
		t.Errorf("control requests %d: shadow compiled %d, skipped %d", h.Arms[1].Requests, h.Arms[1].ShadowCompiled, h.Arms[1].ShadowSkipped)
	}
	if !h.Savings.Enough || len(h.Harm) != 5 || len(h.Tenants) != 6 || len(h.Series) == 0 {
		t.Fatalf("estimate %+v", h)
	}
	holdoutVault := o.VaultDir
	// What the shadow compiles cost, against treatment's compiles (wall
	// time of the compile per request, from the log lines).
	var ms [2]float64
	var n [2]int
	for _, line := range o.logLines() {
		var l struct {
			Reason    string  `json:"reason"`
			CompileMS float64 `json:"compile_ms"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.CompileMS == 0 {
			continue
		}
		k := 0
		if l.Reason == "holdout" {
			k = 1
		}
		ms[k] += l.CompileMS
		n[k]++
	}
	if n[0] > 0 && n[1] > 0 {
		t.Logf("compile per request: treatment %.2f ms (%d), control's shadow %.2f ms (%d)", ms[0]/float64(n[0]), n[0], ms[1]/float64(n[1]), n[1])
	}
	// The metrics count the same requests per arm (this process's series
	// start with this test's first run).
	series := o.scrape()
	for _, a := range h.Arms {
		billed := sum(series, "token_terminator_holdout_billed_cost_units_total", map[string]string{"arm": a.Arm})
		reqs := sum(series, "token_terminator_holdout_requests_total", map[string]string{"arm": a.Arm})
		if math.Abs(billed-a.CostActual) > 1e-6*a.CostActual || int(reqs) != a.Requests {
			t.Errorf("metrics of arm %s: billed %v, %v requests; the stats %v, %d", a.Arm, billed, reqs, a.CostActual, a.Requests)
		}
	}
	if n := sum(series, "token_terminator_holdout_shadow_total", map[string]string{"outcome": "compiled"}); int(n) != h.Arms[1].ShadowCompiled {
		t.Errorf("metrics count %v shadow compiles, the stats %d", n, h.Arms[1].ShadowCompiled)
	}
	if sum(series, "token_terminator_holdout_raw_bytes_total", map[string]string{"arm": "control"}) <= 0 {
		t.Error("no raw bytes counted for the control arm")
	}

	// The truth: the same sessions all treated, and all as sent.
	truth := func(share string) float64 {
		resetProvider()
		o2 := startObserved(t, holdoutSnippet(share), up)
		holdoutRun(t, o2.gateway, up, convs)
		s := readHoldoutStats(t, o2)
		if s.Totals.RawBytes != st.Totals.RawBytes || s.Totals.UsageRequests != st.Totals.UsageRequests {
			t.Fatalf("run %s: %d raw bytes, %d requests with usage; the holdout run had %d, %d", share, s.Totals.RawBytes, s.Totals.UsageRequests, st.Totals.RawBytes, st.Totals.UsageRequests)
		}
		return s.Totals.CostActual
	}
	treated, raw := truth("0%"), truth("100%")
	want := 1 - treated/raw
	t.Logf("measured savings %.3f (%.3f to %.3f) with %d treatment and %d control conversations; the sessions' truth %.3f (billed %.0f treated, %.0f as sent)",
		h.Savings.Point, h.Savings.Low, h.Savings.High, h.Arms[0].Conversations, h.Arms[1].Conversations, want, treated, raw)
	if want <= 0 || want < h.Savings.Low || want > h.Savings.High {
		t.Errorf("the measured interval %.3f to %.3f does not contain the truth %.3f", h.Savings.Low, h.Savings.High, want)
	}

	// A restart on the same vault keeps every conversation's arm from its
	// first request on.
	t.Run("restart", func(t *testing.T) {
		resetProvider()
		g := startGateway(t, holdoutSnippet("50%"), up, holdoutVault)
		again := holdoutRun(t, g, up, firstRequests(convs))
		for i := range arms {
			if again[i] != arms[i] {
				t.Fatalf("conversation %d: arm control=%v before the restart, %v after", i, arms[i], again[i])
			}
		}
	})

	t.Run("page", func(t *testing.T) {
		bin := chromium(t)
		resetProvider()
		o3 := startObserved(t, holdoutSnippet("50%"), up)
		o3.VaultDir = holdoutVault
		o3.loadWithAdmin(holdoutSnippet("50%"))
		s := readHoldoutStats(t, o3)
		dom := string(runChromium(t, bin, o3.URL+"/tt-savings/", "--dump-dom", "--window-size=1280,900"))
		if !strings.Contains(dom, `data-rendered="true"`) {
			t.Fatalf("the page did not render:\n%.2000s", dom)
		}
		if strings.Contains(dom, `<section class="wide" id="holdout" hidden`) {
			t.Fatal("the holdout section is hidden")
		}
		m := regexp.MustCompile(`id="holdout-savings" data-enough="true" data-point="([^"]+)" data-low="([^"]+)" data-high="([^"]+)">([^<]*)<`).FindStringSubmatch(dom)
		if m == nil {
			t.Fatalf("no measured interval on the page:\n%.3000s", dom[strings.Index(dom, `id="holdout"`):])
		}
		for i, want := range []float64{s.Holdout.Savings.Point, s.Holdout.Savings.Low, s.Holdout.Savings.High} {
			if got, _ := strconv.ParseFloat(m[i+1], 64); got != want {
				t.Errorf("page shows %v, the stats %v", got, want)
			}
		}
		if !strings.Contains(m[4], fmt.Sprintf("%.1f%%", 100*s.Holdout.Savings.Point)) {
			t.Errorf("the interval's text %q", m[4])
		}
		for _, a := range s.Holdout.Arms {
			if !strings.Contains(dom, fmt.Sprintf(`data-arm="%s" data-conversations="%d"`, a.Arm, a.Conversations)) {
				t.Errorf("arm %s with %d conversations not on the page", a.Arm, a.Conversations)
			}
		}
		if !strings.Contains(dom, `class="line-treatment"`) || !strings.Contains(dom, `class="line-control"`) && !strings.Contains(dom, `class="point-control"`) {
			t.Error("the plot of the two arms over time is missing")
		}
		if strings.Contains(dom, `data-scrolls="true"`) {
			t.Error("a section scrolls sideways at 1280 px")
		}
		// The last few conversations alone: too few per arm for a number.
		var led struct {
			Records []struct {
				T int64 `json:"t"`
			} `json:"records"`
		}
		if err := json.Unmarshal(o3.adminGet("/token-terminator/ledger?limit=40"), &led); err != nil || len(led.Records) != 40 {
			t.Fatalf("ledger: %v", err)
		}
		since := strconv.FormatInt(led.Records[len(led.Records)-1].T, 10)
		few := string(runChromium(t, bin, o3.URL+"/tt-savings/?since="+since, "--dump-dom", "--window-size=1280,900"))
		if !regexp.MustCompile(`id="holdout-savings" data-enough="false"[^>]*>Not enough data`).MatchString(few) || strings.Contains(few, `id="holdout" hidden`) {
			t.Errorf("with a few conversations the page does not say there is not enough data:\n%.2000s", few[strings.Index(few, `id="holdout"`):])
		}
	})
}

// firstRequests keeps each conversation's first request.
func firstRequests(convs []holdoutConversation) []holdoutConversation {
	out := make([]holdoutConversation, len(convs))
	for i, c := range convs {
		out[i] = holdoutConversation{auth: c.auth, path: c.path, steps: c.steps[:1]}
	}
	return out
}

// TestHoldout_FleetAgrees: two gateways sharing one Redis vault (and so
// its tenant key), no tenant_key configured, put every conversation in the
// same arm from its first request on.
func TestHoldout_FleetAgrees(t *testing.T) {
	srv := redistest.Start(t)
	up := newUpstream(t)
	fakeUpstream(up)
	snippet := func(url string) string {
		return fmt.Sprintf(`
	token_terminator {
		vault redis {
			url %s
			key_prefix holdout:
		}
		holdout 50%%
	}
	reverse_proxy $UPSTREAM
`, url)
	}
	a := startGateway(t, snippet(srv.URL()), up)
	b := gateway{t: a.t, VaultDir: a.VaultDir, LogFile: a.LogFile, client: a.client}
	b.port = freePort(t)
	b.URL = fmt.Sprintf("http://127.0.0.1:%d", b.port)
	cfg := gatewayConfig(a.port, a.LogFile, snippet(srv.URL()), up.addr(), "")
	// Another spelling of the same server: its own store and compiler, as
	// another gateway process would have.
	cfg += fmt.Sprintf("\nhttp://127.0.0.1:%d {\n%s\n}\n", b.port, strings.ReplaceAll(snippet(strings.TrimSuffix(srv.URL(), "/0")), "$UPSTREAM", up.addr()))
	a.load(cfg)

	convs := firstRequests(holdoutSessions(2, 20))
	armsA := holdoutRun(t, a, up, convs)
	armsB := holdoutRun(t, &b, up, convs)
	n := 0
	for i := range armsA {
		if armsA[i] != armsB[i] {
			t.Fatalf("conversation %d: control=%v on one gateway, %v on the other", i, armsA[i], armsB[i])
		}
		if armsA[i] {
			n++
		}
	}
	if n == 0 || n == len(convs) {
		t.Fatalf("%d of %d conversations in control: want both arms", n, len(convs))
	}
}

// TestExcludeTools_AllFormats: through Caddy, results of an excluded tool
// reach the provider inline in every format, where the same requests
// without exclude_tools are rewritten.
func TestExcludeTools_AllFormats(t *testing.T) {
	out := fixtures.ToolOutput(4242, 9000)
	turns := []fixtures.ChatTurn{
		{Tool: "memory", Args: `{"op":"read"}`, Output: out},
		{Tool: "memory", Args: `{"op":"read"}`, Output: out},
	}
	bodies := map[string][]byte{
		"/v1/chat/completions": fixtures.ChatBody("gpt-4o", turns, "go on"),
		"/v1/responses":        fixtures.ResponsesBody("gpt-4o", turns, "go on", fixtures.ResponsesOptions{}),
		"/v1/messages":         fixtures.AnthropicBody("claude-sonnet-4-5", turns, "go on", fixtures.AnthropicOptions{System: true}),
	}
	snippet := func(extra string) string {
		return "\n\ttoken_terminator {\n\t\tvault_dir $VAULT\n\t\t" + extra + "\n\t}\n\treverse_proxy $UPSTREAM\n"
	}
	up := newUpstream(t)
	fakeUpstream(up)
	g := startGateway(t, snippet("exclude_tools recall memory"), up)
	for path, body := range bodies {
		g.verify(path)
		r := g.post(path, body, "anthropic-version: 2023-06-01")
		if r.Status != http.StatusOK || !bytes.Equal(up.last(t).Body, body) {
			t.Errorf("%s: an excluded tool's result was replaced (%s)", path, r.TT)
		}
	}
	g.reload(snippet("exclude_tools recall"), up)
	for path, body := range bodies {
		r := g.post(path, body, "anthropic-version: 2023-06-01")
		if !strings.HasPrefix(r.TT, "accepted") || bytes.Equal(up.last(t).Body, body) {
			t.Errorf("%s: premise: without the exclusion the duplicate is receipted (%s)", path, r.TT)
		}
	}
}
