package integration

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// observed is a gateway with Caddy's admin API on a loopback port: the
// same harness, loaded again with admin on.
type observed struct {
	*gateway
	admin string // http://127.0.0.1:port
	up    *upstream
	snip  string
}

func startObserved(t *testing.T, snippet string, up *upstream) *observed {
	t.Helper()
	g := startGateway(t, snippet, up)
	o := &observed{gateway: g, admin: fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), up: up, snip: snippet}
	o.loadWithAdmin(snippet)
	return o
}

func (o *observed) loadWithAdmin(snippet string) {
	o.t.Helper()
	o.loadAdmin(snippet, "admin "+strings.TrimPrefix(o.admin, "http://"))
}

// loadWithAdminOrigins loads snippet with the admin API allowing its own
// address (as 127.0.0.1 and localhost) and the extra origins.
func (o *observed) loadWithAdminOrigins(snippet string, extra ...string) {
	o.t.Helper()
	addr := strings.TrimPrefix(o.admin, "http://")
	_, port, _ := strings.Cut(addr, ":")
	origins := append([]string{addr, "localhost:" + port}, extra...)
	o.loadAdmin(snippet, fmt.Sprintf("admin %s {\n\t\torigins %s\n\t}", addr, strings.Join(origins, " ")))
}

func (o *observed) loadAdmin(snippet, adminLine string) {
	o.t.Helper()
	cfg := gatewayConfig(o.port, o.LogFile, snippet, o.up.addr(), o.VaultDir)
	cfg = strings.Replace(cfg, "admin off", adminLine, 1)
	o.load(cfg)
	o.reloaded = true
}

// adminGet fetches path from the admin API.
func (o *observed) adminGet(path string) []byte {
	o.t.Helper()
	o.settled()
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(o.admin + path)
	if err != nil {
		o.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		o.t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return b
}

// promSeries is one scraped sample.
type promSeries struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape reads the admin API's /metrics (Prometheus text format).
func (o *observed) scrape() []promSeries {
	o.t.Helper()
	var out []promSeries
	sc := bufio.NewScanner(bytes.NewReader(o.adminGet("/metrics")))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			o.t.Fatalf("metrics line %q: %v", line, err)
		}
		s := promSeries{labels: map[string]string{}, value: v}
		head := line[:sp]
		if i := strings.IndexByte(head, '{'); i >= 0 {
			s.name = head[:i]
			for _, kv := range splitLabels(head[i+1 : len(head)-1]) {
				k, val, _ := strings.Cut(kv, "=")
				s.labels[k], _ = strconv.Unquote(val)
			}
		} else {
			s.name = head
		}
		out = append(out, s)
	}
	return out
}

// splitLabels splits `a="x",b="y,z"` at the commas between pairs.
func splitLabels(s string) []string {
	var out []string
	inQ, start := false, 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\':
			i++
		case s[i] == '"':
			inQ = !inQ
		case s[i] == ',' && !inQ:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// sum adds the samples of name whose labels include want.
func sum(series []promSeries, name string, want map[string]string) float64 {
	var total float64
next:
	for _, s := range series {
		if s.name != name {
			continue
		}
		for k, v := range want {
			if s.labels[k] != v {
				continue next
			}
		}
		total += s.value
	}
	return total
}

// headerInt reads key=N from a Token-Terminator header.
func headerInt(t testing.TB, tt, key string) int64 {
	t.Helper()
	for _, part := range strings.Split(tt, "; ") {
		if k, v, ok := strings.Cut(part, "="); ok && k == key {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%s in %q: %v", key, tt, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in %q", key, tt)
	return 0
}

// clientTotals is what the client saw of a sequence, from the headers.
type clientTotals struct {
	requests, accepted   int
	raw, sent, saved     int64
	receipts             int64
	decisions, passes    map[string]int
	rawTokens, savedToks int64
	// The expected cost figures (rounded in the header) of the judged
	// requests: this request's and over the horizon.
	judged                                     int
	costRaw, costSent, horizonRaw, horizonSent int64
	actualJudged                               float64 // the stats' provider-billed figure, for the page
	// The credentials' verification requests (gateway.verify) sent first:
	// candidates that passed through (unverified_tenant), uncompiled and
	// without a ledger record, and their bytes.
	verifications int
	verifyBytes   int64
}

func (c *clientTotals) add(t testing.TB, r response) {
	t.Helper()
	if c.decisions == nil {
		c.decisions, c.passes = map[string]int{}, map[string]int{}
	}
	c.requests++
	raw, sent := headerInt(t, r.TT, "raw_bytes"), headerInt(t, r.TT, "sent_bytes")
	c.raw += raw
	decision, _, _ := strings.Cut(r.TT, ";")
	if d, reason, ok := strings.Cut(decision, "="); ok {
		c.decisions[d]++
		c.passes[reason]++
		c.sent += raw
	} else {
		c.decisions[decision]++
		c.sent += sent
		c.saved += raw - sent
		c.accepted++
		c.receipts += headerInt(t, r.TT, "receipts")
	}
	if strings.Contains(r.TT, "cost_raw=") {
		c.judged++
		c.costRaw += headerInt(t, r.TT, "cost_raw")
		c.costSent += headerInt(t, r.TT, "cost_sent")
		c.horizonRaw += headerInt(t, r.TT, "cost_horizon_raw")
		c.horizonSent += headerInt(t, r.TT, "cost_horizon_sent")
	}
	if strings.Contains(r.TT, "raw_tokens=") {
		rt := headerInt(t, r.TT, "raw_tokens")
		c.rawTokens += rt
		if !strings.HasPrefix(r.TT, "passthrough") {
			c.savedToks += rt - headerInt(t, r.TT, "sent_tokens")
		}
	}
}

// near reports whether a ledger or metric sum of n figures matches the
// headers' sum of the same figures, each rounded to a whole unit there.
func near(got float64, header int64, n int) bool {
	return math.Abs(got-float64(header)) <= 0.5*float64(n)+1e-6
}

// knownUsage is the usage the upstream reports for its i-th request
// (answerWithUsage): prompt tokens, of which cached.
func knownUsage(i int) (prompt, cached int) { return 3000 + 100*i, 1024 * (i % 3) }

// answerWithUsage makes the upstream answer its first n requests with a
// chat completion that carries knownUsage(i).
func answerWithUsage(up *upstream, n int) {
	up.respond = func(i int, w http.ResponseWriter) bool {
		if i >= n {
			return false
		}
		p, c := knownUsage(i)
		fmt.Fprintf(w, `{"id":"resp","object":"chat.completion","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":%d}}}`, p, c)
		return true
	}
}

// knownCost is what the cost model makes of knownUsage(i) for a gpt-4o
// request (cached input at 0.5) or one whose model was not read (the
// bypass: priced as the "other" family, cached at 0.1).
func knownCost(i int, modelRead bool) float64 {
	p, c := knownUsage(i)
	read := 0.1
	if modelRead {
		read = 0.5
	}
	return read*float64(c) + float64(p-c)
}

// knownSequenceBypass is the upstream index of knownSequence's bypassed
// request; its requests go upstream in order, 5 of them.
const (
	knownSequenceBypass = 3
	knownSequenceSent   = 5
)

// knownSequence sends: a first delivery (pass-through), its second
// exposure (a lease receipt), a same-request duplicate, a bypassed
// request and a small request (no candidates), plus a WebSocket upgrade.
func knownSequence(t *testing.T, o *observed, tag string) clientTotals {
	t.Helper()
	var ct clientTotals
	// Both credentials are verified first, as their first requests would
	// be: the provider accepts one request of each.
	for _, c := range []string{"Authorization: Bearer sk-observe-A", "Authorization: Bearer sk-observe-B"} {
		o.verify(chatPath, c)
		ct.verifications++
		ct.verifyBytes += int64(len(verifyBody))
	}
	out := bigOutput("observe-"+tag, 12000)
	step1, step2 := agentRun("List the repo "+tag+".", out)
	r := o.post(chatPath, step1, "Authorization: Bearer sk-observe-A")
	ct.add(t, r)
	r = o.post(chatPath, step2, "Authorization: Bearer sk-observe-A")
	expectAccepted(t, r, 1)
	ct.add(t, r)
	dupOut := bigOutput("observe-dup-"+tag, 10000)
	dup := newConversation("sys", "check twice "+tag).tool("bash", `{"cmd":"cat a"}`, dupOut).tool("bash", `{"cmd":"cat a"}`, dupOut).body()
	r = o.post(chatPath, dup, "Authorization: Bearer sk-observe-B")
	expectAccepted(t, r, 1)
	ct.add(t, r)
	r = o.post(chatPath, step2, "Authorization: Bearer sk-observe-A", "Token-Terminator: bypass")
	expectPassthroughHeader(t, chatPath, r, "bypass")
	if _, ok := o.up.last(t).Header["Token-Terminator"]; ok {
		t.Fatal("the bypass header went upstream")
	}
	expectSame(t, step2, o.up.last(t))
	ct.add(t, r)
	r = o.post(chatPath, []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`), "Authorization: Bearer sk-observe-B")
	ct.add(t, r)
	ws := o.do(http.MethodGet, "/v1/responses", nil, 0, "Upgrade: websocket", "Connection: Upgrade")
	_ = ws
	o.waitAccounted(ct.requests, ct.verifications)
	return ct
}

// TestObserve_MetricsAfterKnownSequence scrapes Caddy's admin /metrics
// after a known sequence, reloads, and checks the counters carried on.
func TestObserve_MetricsAfterKnownSequence(t *testing.T) {
	up := newUpstream(t)
	answerWithUsage(up, knownSequenceSent)
	o := startObserved(t, defaultSnippet, up)
	ct := knownSequence(t, o, "m1")
	if ct.accepted != 2 || ct.decisions["passthrough"] != 3 || ct.passes["bypass"] != 1 || ct.judged == 0 {
		t.Fatalf("sequence went differently than planned: %+v", ct)
	}
	var uncached, cached, actualGPT, actualOther float64
	for i := range knownSequenceSent {
		p, c := knownUsage(i)
		uncached, cached = uncached+float64(p-c), cached+float64(c)
		if i == knownSequenceBypass {
			actualOther += knownCost(i, false)
		} else {
			actualGPT += knownCost(i, true)
		}
	}

	m := o.scrape()
	chat := map[string]string{"format": "openai_chat"}
	checks := []struct {
		name string
		got  float64
		want float64
	}{
		{"candidates", sum(m, "token_terminator_candidate_requests_total", chat), float64(ct.requests + ct.verifications)},
		{"unverified", sum(m, "token_terminator_candidate_requests_total", map[string]string{"reason": "unverified_tenant"}), float64(ct.verifications)},
		{"accepted gpt-4o", sum(m, "token_terminator_candidate_requests_total", map[string]string{"decision": "accepted", "model": "gpt-4o"}), 2},
		{"bypass", sum(m, "token_terminator_candidate_requests_total", map[string]string{"reason": "bypass"}), 1},
		{"bytes raw", sum(m, "token_terminator_bytes_total", map[string]string{"kind": "raw"}), float64(ct.raw + ct.verifyBytes)},
		{"bytes sent", sum(m, "token_terminator_bytes_total", map[string]string{"kind": "sent"}), float64(ct.sent + ct.verifyBytes)},
		{"bytes saved", sum(m, "token_terminator_bytes_total", map[string]string{"kind": "saved"}), float64(ct.saved)},
		{"tokens saved", sum(m, "token_terminator_tokens_total", map[string]string{"kind": "saved"}), float64(ct.savedToks)},
		{"lease receipts", sum(m, "token_terminator_receipts_total", map[string]string{"kind": "lease"}), 1},
		{"duplicate receipts", sum(m, "token_terminator_receipts_total", map[string]string{"kind": "duplicate"}), 1},
		{"websocket", sum(m, "token_terminator_websocket_upgrades_total", map[string]string{"format": "openai_responses"}), 1},
		{"no fail-open", sum(m, "token_terminator_fail_open_total", nil), 0},
		{"vault artifacts", sum(m, "token_terminator_vault_artifacts", nil), 2},
		{"vault written", sum(m, "token_terminator_vault_artifacts_written_total", nil), 2},
		{"compile latency count", sum(m, "token_terminator_duration_seconds_count", map[string]string{"stage": "compile"}), float64(ct.requests - 1)}, // the bypass is not compiled
		// Only the two rewrites reached the final gate (the first delivery
		// had nothing to replace, the small request no candidates).
		{"gate latency count", sum(m, "token_terminator_duration_seconds_count", map[string]string{"stage": "gate"}), 2},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	// Cost: the expected figures match the headers' (rounded there), the
	// provider's usage is counted as it reported it and priced by the
	// cost model, and every request is the unlabelled tenant's.
	cost := func(kind string, labels ...string) float64 {
		want := map[string]string{"kind": kind}
		for i := 0; i+1 < len(labels); i += 2 {
			want[labels[i]] = labels[i+1]
		}
		return sum(m, "token_terminator_cost_units_total", want)
	}
	costChecks := []struct {
		name      string
		got, want float64
		tolerance float64
	}{
		{"cost raw", cost("raw"), float64(ct.costRaw), 0.5 * float64(ct.judged)},
		{"cost horizon raw", cost("horizon_raw"), float64(ct.horizonRaw), 0.5 * float64(ct.judged)},
		{"cost horizon sent", cost("horizon_sent"), float64(ct.horizonSent), 0.5 * float64(ct.judged)},
		{"usage uncached", sum(m, "token_terminator_usage_tokens_total", map[string]string{"kind": "uncached"}), uncached, 0},
		{"usage cache read", sum(m, "token_terminator_usage_tokens_total", map[string]string{"kind": "cache_read"}), cached, 0},
		{"usage cache write", sum(m, "token_terminator_usage_tokens_total", map[string]string{"kind": "cache_write"}), 0, 0},
		{"actual gpt-4o", cost("actual", "model", "gpt-4o"), actualGPT, 1e-6},
		{"actual bypass", cost("actual", "model", "unknown"), actualOther, 1e-6},
		{"tenant actual", sum(m, "token_terminator_tenant_cost_units_total", map[string]string{"tenant": "unlabelled", "kind": "actual"}), actualGPT + actualOther, 1e-6},
		{"tenant horizon sent", sum(m, "token_terminator_tenant_cost_units_total", map[string]string{"tenant": "unlabelled", "kind": "horizon_sent"}), cost("horizon_sent"), 1e-6},
		{"expected judged", cost("expected_judged"), float64(ct.costSent), 0.5 * float64(ct.judged)},
	}
	for _, c := range costChecks {
		if math.Abs(c.got-c.want) > c.tolerance {
			t.Errorf("%s = %v, want %v (±%v)", c.name, c.got, c.want, c.tolerance)
		}
	}
	if hs, hr := cost("horizon_sent"), cost("horizon_raw"); hr <= 0 || hs > hr {
		t.Errorf("over the horizon sent %v, raw %v: want 0 < sent <= raw", hs, hr)
	}
	gate, compile := sum(m, "token_terminator_duration_seconds_sum", map[string]string{"stage": "gate"}), sum(m, "token_terminator_duration_seconds_sum", map[string]string{"stage": "compile"})
	if gate <= 0 || gate >= compile {
		t.Errorf("gate seconds %v, compile seconds %v: the gate is part of the compile", gate, compile)
	}
	if sum(m, "token_terminator_vault_bytes", nil) <= 0 || sum(m, "token_terminator_cost_units_total", map[string]string{"kind": "raw"}) <= 0 {
		t.Error("vault bytes or cost not reported")
	}
	// Bounded labels only: no tenant hash, conversation or raw model.
	for _, s := range m {
		if !strings.HasPrefix(s.name, "token_terminator_") {
			continue
		}
		for k := range s.labels {
			switch k {
			case "format", "decision", "reason", "model", "kind", "stage", "action", "le",
				"tenant": // the operator's tenant_label names (here none: "unlabelled")
				if k == "tenant" && s.labels[k] != "unlabelled" {
					t.Errorf("tenant label %q on %s", s.labels[k], s.name)
				}
			default:
				t.Errorf("unexpected label %s on %s", k, s.name)
			}
		}
	}

	// A reload keeps the counters (the same collectors on the new
	// config's registry), and they go on counting.
	o.loadWithAdmin(defaultSnippet + "\n")
	r := o.post(chatPath, []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"again"}]}`), "Authorization: Bearer sk-observe-A")
	expectPassthroughHeader(t, chatPath, r, "")
	o.waitAccounted(ct.requests+1, ct.verifications)
	m = o.scrape()
	if got, want := sum(m, "token_terminator_candidate_requests_total", nil), ct.requests+ct.verifications+1; got != float64(want) {
		t.Errorf("after reload: %v candidates, want %d", got, want)
	}
}

// TestObserve_LedgerAndStats checks the admin API's ledger and stats
// against what the client saw, and that neither holds content or
// credentials.
func TestObserve_LedgerAndStats(t *testing.T) {
	up := newUpstream(t)
	o := startObserved(t, `
	token_terminator {
		vault_dir $VAULT
		tenant_key `+observeTenantKey+`
		tenant_label `+tenantID(observeTenantKey, "Bearer sk-observe-A")+` team-a
	}
	reverse_proxy $UPSTREAM
`, up)
	answerWithUsage(up, knownSequenceSent)
	ct := knownSequence(t, o, "l1")

	var led struct {
		Records []map[string]any `json:"records"`
	}
	raw := o.adminGet("/token-terminator/ledger?limit=100")
	if err := json.Unmarshal(raw, &led); err != nil {
		t.Fatal(err)
	}
	if len(led.Records) != ct.requests {
		t.Fatalf("%d ledger records, want %d", len(led.Records), ct.requests)
	}
	for _, secret := range []string{"sk-observe", "observe-l1", "List the repo", "cat a", "gpt-4o-"} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Fatalf("ledger carries %q", secret)
		}
	}
	// Newest first: the small request, then the bypass.
	if led.Records[0]["reason"] != "no_candidates" || led.Records[1]["reason"] != "bypass" || led.Records[1]["tenant_label"] != "team-a" {
		t.Fatalf("ledger order or labels: %v / %v", led.Records[0], led.Records[1])
	}
	if r := o.adminGet("/token-terminator/ledger?limit=2"); bytes.Count(r, []byte(`"decision"`)) != 2 {
		t.Fatalf("limit=2 returned %s", r)
	}
	// Each record carries the provider's usage for its request (newest
	// first: record j is upstream request n-1-j), priced by the cost model.
	var actual float64
	for j, rec := range led.Records {
		i := len(led.Records) - 1 - j
		p, c := knownUsage(i)
		u, _ := rec["usage"].(map[string]any)
		want := knownCost(i, i != knownSequenceBypass)
		if u == nil || u["uncached"] != float64(p-c) || u["cache_read"] != float64(c) || u["cache_write"] != float64(0) ||
			math.Abs(u["cost"].(float64)-want) > 1e-6 {
			t.Fatalf("record %d usage %v, want uncached %d cache_read %d cost %v", j, rec["usage"], p-c, c, want)
		}
		actual += want
	}

	var st struct {
		Totals struct {
			Requests         int     `json:"requests"`
			Accepted         int     `json:"accepted"`
			RawBytes         int64   `json:"raw_bytes"`
			SentBytes        int64   `json:"sent_bytes"`
			SavedBytes       int64   `json:"saved_bytes"`
			Receipts         int64   `json:"receipts"`
			CostRaw          float64 `json:"cost_raw"`
			CostHorizonRaw   float64 `json:"cost_horizon_raw"`
			CostHorizonSent  float64 `json:"cost_horizon_sent"`
			CostHorizonSaved float64 `json:"cost_horizon_saved"`
			UsageRequests    int     `json:"usage_requests"`
			UsageCacheRead   int64   `json:"usage_cache_read_tokens"`
			CostActual       float64 `json:"cost_actual"`
			JudgedRequests   int     `json:"judged_requests"`
			CostExpJudged    float64 `json:"cost_expected_judged"`
		} `json:"totals"`
		Decisions map[string]int `json:"decisions"`
		Reasons   map[string]int `json:"reasons"`
		Tenants   []struct {
			Label         string  `json:"label"`
			Requests      int     `json:"requests"`
			UsageRequests int     `json:"usage_requests"`
			CostActual    float64 `json:"cost_actual"`
		} `json:"tenants"`
		Conversations []struct {
			SavedBytes int64 `json:"saved_bytes"`
		} `json:"top_conversations"`
		Vault struct {
			Artifacts int64 `json:"artifacts"`
		} `json:"vault"`
	}
	if err := json.Unmarshal(o.adminGet("/token-terminator/stats"), &st); err != nil {
		t.Fatal(err)
	}
	tot := st.Totals
	if tot.Requests != ct.requests || tot.Accepted != ct.accepted || tot.RawBytes != ct.raw || tot.SentBytes != ct.sent ||
		tot.SavedBytes != ct.saved || tot.Receipts != ct.receipts {
		t.Fatalf("stats totals %+v, client saw %+v", tot, ct)
	}
	if st.Decisions["accepted"] != 2 || st.Reasons["bypass"] != 1 || st.Vault.Artifacts != 2 {
		t.Fatalf("decisions %v reasons %v vault %+v", st.Decisions, st.Reasons, st.Vault)
	}
	// Expected against the headers, actual against the upstream's usage.
	var cachedAll int64
	for i := range knownSequenceSent {
		_, c := knownUsage(i)
		cachedAll += int64(c)
	}
	if !near(tot.CostRaw, ct.costRaw, ct.judged) || !near(tot.CostHorizonRaw, ct.horizonRaw, ct.judged) ||
		!near(tot.CostHorizonSent, ct.horizonSent, ct.judged) || math.Abs(tot.CostHorizonSaved-(tot.CostHorizonRaw-tot.CostHorizonSent)) > 1e-6 ||
		tot.CostHorizonSaved < 0 || tot.UsageRequests != knownSequenceSent || tot.UsageCacheRead != cachedAll ||
		math.Abs(tot.CostActual-actual) > 1e-6 || tot.JudgedRequests != ct.judged || !near(tot.CostExpJudged, ct.costSent, ct.judged) {
		t.Fatalf("stats cost totals %+v, client saw %+v, priced usage %v", tot, ct, actual)
	}
	// team-a sent step 1, step 2 and the bypass: upstream requests 0, 1, 3.
	teamA := knownCost(0, true) + knownCost(1, true) + knownCost(knownSequenceBypass, false)
	labelled := false
	for _, tn := range st.Tenants {
		labelled = labelled || (tn.Label == "team-a" && tn.Requests == 3 && tn.UsageRequests == 3 && math.Abs(tn.CostActual-teamA) < 1e-6)
	}
	if !labelled || len(st.Conversations) == 0 || st.Conversations[0].SavedBytes <= 0 {
		t.Fatalf("tenants %+v conversations %+v", st.Tenants, st.Conversations)
	}
	// A window that ends before the requests is empty.
	if err := json.Unmarshal(o.adminGet("/token-terminator/stats?until=2000-01-01T00:00:00Z"), &st); err != nil || st.Totals.Requests != 0 {
		t.Fatalf("until=2000: %+v, %v", st.Totals, err)
	}
}

// observeTenantKey is the tenant key of the ledger test, so that it can
// name a tenant id in tenant_label.
const observeTenantKey = "observe-tenant-key-0123456789abcdef"

// tenantID is the tenant id of a credential under key: what the ledger
// records and tenant_label names (HMAC-SHA-256, 32 hex digits).
func tenantID(key, credential string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(credential))
	return hex.EncodeToString(m.Sum(nil))[:32]
}
