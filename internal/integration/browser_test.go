package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// chromium returns the path of a headless-capable Chromium, installing
// Debian's chromium when it is absent and the test runs as root; it skips
// the test, saying why, only when none can be had.
func chromium(t *testing.T) string {
	t.Helper()
	find := func() string {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
			if p, err := exec.LookPath(name); err == nil {
				return p
			}
		}
		return ""
	}
	if p := find(); p != "" {
		return p
	}
	if os.Geteuid() != 0 {
		t.Skip("no chromium on PATH and not root, so it cannot be installed: apt-get install -y chromium")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	install := func() ([]byte, error) {
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "--no-install-recommends", "chromium")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	if out, err := install(); err != nil {
		// The package lists may be missing on a fresh machine.
		if upd, uerr := exec.CommandContext(ctx, "apt-get", "update").CombinedOutput(); uerr != nil {
			t.Skipf("chromium could not be installed (apt-get update: %v): %s\n%s", uerr, upd, out)
		}
		if out, err = install(); err != nil {
			t.Skipf("chromium could not be installed: %v\n%s", err, out)
		}
	}
	if p := find(); p != "" {
		return p
	}
	t.Skip("chromium was installed but is not on PATH")
	return ""
}

// runChromium runs headless Chromium with args on url and returns stdout.
func runChromium(t *testing.T, bin, url string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	profile := t.TempDir()
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--user-data-dir=" + profile, "--virtual-time-budget=15000"}, args...)
	cmd := exec.CommandContext(ctx, bin, append(all, url)...)
	cmd.Env = append(os.Environ(), "HOME="+profile)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return out
}

// savingsSnippet mounts the savings page on /tt-savings/ beside the
// gateway.
const savingsSnippet = `
	handle /tt-savings/* {
		token_terminator_savings
	}
	handle {
		token_terminator {
			vault_dir $VAULT
		}
		reverse_proxy $UPSTREAM
	}
`

// replaySession sends a corpus step session (or a generated one when the
// corpus is absent) through the gateway and returns what the client saw.
func replaySession(t *testing.T, o *observed) (clientTotals, string) {
	t.Helper()
	reqs, what := generatedSession()
	if dir, ok := fixtures.CorpusDir(); ok {
		if files, err := fixtures.LoadCorpus(dir); err == nil {
			for _, f := range files {
				if f.Steps && len(f.Requests) >= 8 && len(f.Requests) <= 40 {
					reqs, what = f.Requests, "corpus "+f.Name
					break
				}
			}
		}
	}
	var ct clientTotals
	for _, r := range reqs {
		resp := o.post(r.Path, r.Body)
		if resp.Status != 200 {
			t.Fatalf("%s: status %d", r.Path, resp.Status)
		}
		ct.add(t, resp)
	}
	o.waitAccounted(ct.requests, 0)
	return ct, what
}

func generatedSession() ([]fixtures.CorpusRequest, string) {
	return fixtures.Session(fixtures.SessionOptions{Format: "openai_chat", Steps: 16, PersonTurns: 4, OutputChars: 9000, ReReadEvery: 3, Seed: 13}),
		"generated chat session, 16 steps"
}

// domValue reads the data-value of the element with id.
func domValue(t *testing.T, dom, id string) string {
	t.Helper()
	m := regexp.MustCompile(`id="` + regexp.QuoteMeta(id) + `"[^>]*data-value="([^"]*)"`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("no data-value on #%s in the rendered page", id)
	}
	return m[1]
}

// TestBrowser_SavingsPage loads the savings page in headless Chromium
// against a gateway that served a session, and checks that the page's
// script rendered the totals the client saw (read from the DOM after the
// script ran, not from the API): on a site route (token_terminator_savings)
// and on Caddy's admin API at /token-terminator/.
//
// The admin API checks a browser's request for an allowed origin whenever
// it carries Origin or Sec-Fetch-Mode (caddy v2.11.9 admin.go, serveHTTP
// and checkOrigin). Chromium sends Sec-Fetch-Mode: navigate to a loopback
// address, but a typed or bookmarked navigation has neither Origin nor
// Referer, so the origin it compares is the empty one, which no default
// origin matches:
//
//	client is not allowed to access from origin ''
//
// An empty entry in admin { origins … } matches exactly that, and the page's
// own fetches carry a Referer of the admin address, which the listed
// origins match.
func TestBrowser_SavingsPage(t *testing.T) {
	bin := chromium(t)
	up := newUpstream(t)
	answerWithUsage(up, math.MaxInt) // every answer carries usage
	o := startObserved(t, savingsSnippet, up)
	ct, what := replaySession(t, o)
	if ct.accepted == 0 || ct.saved <= 0 {
		t.Fatalf("%s saved nothing: %+v", what, ct)
	}
	// The provider-billed figure the page must show is the stats API's
	// (TestObserve_LedgerAndStats checks that one against the usage).
	var st struct {
		Totals struct {
			CostActualJudged float64 `json:"cost_actual_judged"`
			JudgedRequests   int     `json:"judged_requests"`
		} `json:"totals"`
	}
	if err := json.Unmarshal(o.adminGet("/token-terminator/stats"), &st); err != nil || st.Totals.JudgedRequests != ct.judged {
		t.Fatalf("stats: %+v (err %v), %d judged requests seen by the client", st.Totals, err, ct.judged)
	}
	ct.actualJudged = st.Totals.CostActualJudged
	url := o.URL + "/tt-savings/"
	if page := o.do(http.MethodGet, "/tt-savings/", nil, 0); !bytes.Equal(page.Body, o.adminGet("/token-terminator/")) {
		t.Fatal("the site route and the admin API serve different pages")
	}
	t.Run("site route", func(t *testing.T) {
		// 1280 px wide: no section may scroll sideways.
		checkRenderedPage(t, string(runChromium(t, bin, url, "--dump-dom", "--window-size=1280,900")), ct, what)
	})
	adminPage := o.admin + "/token-terminator/"
	t.Run("admin API, default origins", func(t *testing.T) {
		dom := string(runChromium(t, bin, adminPage, "--dump-dom"))
		if strings.Contains(dom, `data-rendered="true"`) || !strings.Contains(dom, "client is not allowed to access from origin ''") {
			t.Fatalf("want the admin API to refuse the navigation's empty origin; got:\n%.1000s", dom)
		}
	})
	t.Run("admin API, origins with the empty one", func(t *testing.T) {
		o.loadWithAdminOrigins(o.snip, `""`)
		checkRenderedPage(t, string(runChromium(t, bin, adminPage, "--dump-dom")), ct, what)
	})

	// A screenshot, for people: TT_SAVINGS_SCREENSHOT=/path/page.png.
	if shot := os.Getenv("TT_SAVINGS_SCREENSHOT"); shot != "" {
		abs, _ := filepath.Abs(shot)
		runChromium(t, bin, url, "--screenshot="+abs, "--window-size=1400,1100", "--hide-scrollbars")
		t.Logf("screenshot of %s: %s", what, abs)
	}
}

// checkRenderedPage checks the DOM Chromium rendered for the savings page
// against what the client saw.
func checkRenderedPage(t *testing.T, dom string, ct clientTotals, what string) {
	t.Helper()
	if !strings.Contains(dom, `data-rendered="true"`) {
		t.Fatalf("the page did not render (%s):\n%.2000s", what, dom)
	}
	if got := domValue(t, dom, "kpi-saved-bytes"); got != strconv.FormatInt(ct.saved, 10) {
		t.Errorf("page shows %s bytes saved, client saw %d", got, ct.saved)
	}
	if got := domValue(t, dom, "kpi-requests"); got != strconv.Itoa(ct.requests) {
		t.Errorf("page shows %s requests, client sent %d", got, ct.requests)
	}
	if got := domValue(t, dom, "kpi-accepted"); got != strconv.Itoa(ct.accepted) {
		t.Errorf("page shows %s accepted, client saw %d", got, ct.accepted)
	}
	if got := domValue(t, dom, "kpi-receipts"); got != strconv.FormatInt(ct.receipts, 10) {
		t.Errorf("page shows %s receipts, client saw %d", got, ct.receipts)
	}
	if got := domValue(t, dom, "kpi-saved-tokens"); got != strconv.FormatInt(ct.savedToks, 10) {
		t.Errorf("page shows %s tokens saved, client saw %d", got, ct.savedToks)
	}
	// The net saving with the cache is a ratio of the horizon figures
	// (each prices a prompt once per later read, so their sum is no count
	// of what was sent), shown with its basis. The headers round raw and
	// sent each.
	hs := regexp.MustCompile(`id="kpi-horizon-saved" data-value="([^"]*)" data-saved="([^"]*)" data-raw="([^"]*)"[^>]*>([^<]*)<`).FindStringSubmatch(dom)
	if hs == nil {
		t.Fatal("no net saving on the page")
	}
	pctShown, _ := strconv.ParseFloat(hs[1], 64)
	saved, _ := strconv.ParseFloat(hs[2], 64)
	want := 100 * float64(ct.horizonRaw-ct.horizonSent) / float64(ct.horizonRaw)
	if !near(saved, ct.horizonRaw-ct.horizonSent, 2*ct.judged) || math.Abs(pctShown-want) > 0.2 || pctShown <= 0 || pctShown > 100 || hs[4] != hs[1]+"%" {
		t.Errorf("page shows %q (%v%%, %v saved), client saw %d - %d (%.1f%%)", hs[4], pctShown, saved, ct.horizonRaw, ct.horizonSent, want)
	}
	if !strings.Contains(dom, `id="kpi-horizon-basis"`) || !regexp.MustCompile(`id="kpi-horizon-basis"[^>]*>[^<]*cost_horizon[^<]*not a count of tokens`).MatchString(dom) {
		t.Error("the net saving's basis is not shown")
	}
	// No absolute figure saved exceeds what it is part of.
	if tok, _ := strconv.ParseFloat(domValue(t, dom, "kpi-saved-tokens"), 64); ct.rawTokens > 0 && tok > float64(ct.rawTokens) {
		t.Errorf("tokens saved %v exceed the %d raw tokens", tok, ct.rawTokens)
	}
	// One unit per axis: each chart is of one unit and draws only its
	// series; costs name their unit.
	for chart, spec := range map[string]struct {
		unit string
		bars []string
	}{
		"chart-days":   {"bytes", []string{"bar-raw_bytes", "bar-sent_bytes"}},
		"chart-tokens": {"tokens", []string{"bar-saved_tokens"}},
		"chart-cost":   {"base-price input tokens", []string{"bar-cost_saved"}},
	} {
		m := regexp.MustCompile(`<svg id="` + chart + `" data-unit="([^"]*)"[^>]*>(.*?)</svg>`).FindStringSubmatch(strings.ReplaceAll(dom, "\n", " "))
		if m == nil || m[1] != spec.unit {
			t.Errorf("%s: unit %v, want %q", chart, m, spec.unit)
			continue
		}
		for _, c := range regexp.MustCompile(`class="(bar-[a-z_]+)"`).FindAllStringSubmatch(m[2], -1) {
			if !slices.Contains(spec.bars, c[1]) {
				t.Errorf("%s (%s) draws %s", chart, spec.unit, c[1])
			}
		}
	}
	if n := strings.Count(dom, `class="cost-unit" data-unit="base-price input tokens"`); n < 2 {
		t.Errorf("%d cost figures name their unit", n)
	}
	if strings.Contains(dom, `data-scrolls="true"`) {
		t.Errorf("a section scrolls sideways: %s", regexp.MustCompile(`<section[^>]*data-scrolls="true"[^>]*>\s*<h2>[^<]*`).FindAllString(dom, -1))
	}
	if got, _ := strconv.ParseFloat(domValue(t, dom, "kpi-actual"), 64); math.Abs(got-ct.actualJudged) > 1e-6 || got <= 0 {
		t.Errorf("page shows %v billed by the provider, the stats say %v", got, ct.actualJudged)
	}
	// The per-day chart drew one raw and one sent bar per day, and its
	// bars add up to the totals.
	barSum := func(class string) (int, int64) {
		ms := regexp.MustCompile(`<rect[^>]*class="`+class+`"[^>]*data-value="([0-9.]+)"`).FindAllStringSubmatch(dom, -1)
		var total int64
		for _, m := range ms {
			v, _ := strconv.ParseFloat(m[1], 64)
			total += int64(v)
		}
		return len(ms), total
	}
	if n, total := barSum("bar-raw_bytes"); n == 0 || total != ct.raw {
		t.Errorf("raw bytes chart: %d bars adding up to %d, want %d", n, total, ct.raw)
	}
	if n, total := barSum("bar-sent_bytes"); n == 0 || total != ct.sent {
		t.Errorf("sent bytes chart: %d bars adding up to %d, want %d", n, total, ct.sent)
	}
	// Decisions table and top conversations.
	for d, n := range ct.decisions {
		if !strings.Contains(dom, fmt.Sprintf(`data-kind="decision" data-name="%s" data-value="%d"`, d, n)) {
			t.Errorf("decision %s ×%d not in the table", d, n)
		}
	}
	if !regexp.MustCompile(`<table id="conversations">.*?<code>c_[0-9a-f]{32}</code>`).MatchString(strings.ReplaceAll(dom, "\n", " ")) {
		t.Error("no conversation listed")
	}
	if !strings.Contains(dom, `data-artifacts="`) || strings.Contains(dom, `data-artifacts=""`) {
		t.Error("vault usage not shown")
	}
}
