package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// client sends requests from this process, over a new connection each
// time or over kept-alive ones.
type client struct {
	hc *http.Client
}

func newClient(newConn bool) *client {
	tr := &http.Transport{
		DisableCompression:  true,
		DisableKeepAlives:   newConn,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     time.Minute,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}
	return &client{hc: &http.Client{Transport: tr, Timeout: 2 * time.Minute}}
}

// answer is one request's outcome.
type answer struct {
	dur time.Duration
	tt  string // the Token-Terminator header
}

// post sends body to url and reads the whole answer, which must be the
// sink's answer for path.
func (c *client) post(ctx context.Context, url, path, auth string, body []byte) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+path, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", auth)
	req.Header.Set("x-api-key", strings.TrimPrefix(auth, "Bearer "))
	req.Header.Set("anthropic-version", "2023-06-01")
	t0 := time.Now()
	resp, err := c.hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	if err != nil {
		return answer{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return answer{}, fmt.Errorf("POST %s: status %d", path, resp.StatusCode)
	}
	if err := checkAnswer(path, data); err != nil {
		return answer{}, err
	}
	return answer{dur: d, tt: resp.Header.Get("Token-Terminator")}, nil
}

// ttField returns the value of key in a Token-Terminator header.
func ttField(header, key string) string {
	for _, part := range strings.Split(header, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok && k == key {
			return v
		}
	}
	return ""
}

// result is one case's figures.
type result struct {
	format, size, mode string
	conn               string
	results            int // tool results per request (receipts expected)
	bodyBytes          int
	added, gw, direct  []time.Duration
	cpuTicks           int64 // Caddy's CPU during the timed gateway requests
	faults             int64 // Caddy's minor page faults during them
	peakKB             int64 // VmHWM of the Caddy process (largest over its processes for first)
	tokens             map[string]int
	notCompiled        map[string]int // timed requests not compiled with every receipt, by decision
	sentBytes          int
	load               string
	when               time.Time
}

type bench struct {
	o        options
	sink     *sinkProcess
	template string
	tmp      string
	cl       *client
	convs    int // conversations generated so far (each new content)
}

// verify sends a new tenant's first requests, untimed: the gateway keeps
// no state for a credential until the provider has answered it with a 2xx,
// so a new tenant's first request goes out as sent
// (passthrough=unverified_tenant), as a real key's first request does. The
// verification is recorded as the answer ends, so it is sent again until
// the gateway has it. Its body is a small request of the shape, which
// leaves no lineage behind.
func (b *bench) verify(ctx context.Context, g *gateway, sh shape, tenant string) error {
	for i := 0; ; i++ {
		a, err := b.cl.post(ctx, g.url, sh.path, "Bearer "+tenant, sh.small())
		if err != nil {
			return err
		}
		if !strings.Contains(a.tt, "unverified_tenant") {
			return nil
		}
		if i == 100 {
			return fmt.Errorf("%s: tenant %s still unverified after %d requests: %q", sh.name, tenant, i+1, a.tt)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (b *bench) nextConversation(sh shape, results int) (prev, body []byte) {
	b.convs++
	return conversation(sh, b.o.seed, b.convs, results)
}

func (b *bench) runCase(ctx context.Context, sh shape, size int, mode string) (*result, error) {
	// 50 results of 20 KB per MB, as the in-process benchmarks' 1 MB request.
	results := max(1, (size*50+1<<19)>>20)
	scale := func(n, least int) int { return max(min(n, least), n*(1<<20)/max(size, 1<<20)) }
	r := &result{format: sh.name, size: sizeName(size), mode: mode, conn: "new", results: results, tokens: map[string]int{}, notCompiled: map[string]int{}}
	if !b.o.newConn {
		r.conn = "keep"
	}
	c := &caseRun{b: b, ctx: ctx, sh: sh, results: results, want: strconv.Itoa(results), r: r}
	if mode == "first" {
		return c.first()
	}

	g, err := startGateway(ctx, b.o.caddy, b.template, b.tmp, b.sink.addr, "")
	if err != nil {
		return nil, err
	}
	defer g.stop()
	warmTenant := "sk-warm"
	body, err := c.setup(g, warmTenant)
	if err != nil {
		return nil, err
	}
	n := scale(b.o.n, 20)
	warmup := b.o.warmup
	if mode == "cold" {
		n = scale(b.o.coldN, 5)
		warmup = min(warmup, 3)
	}
	// step returns the tenant and body of timed request i (sending the
	// untimed previous request of a cold conversation first).
	step := func(i int) (string, []byte, error) {
		if mode == "warm" {
			return warmTenant, body, nil
		}
		return c.coldStep(g, fmt.Sprintf("sk-cold-%d", i))
	}
	for i := 0; i < warmup; i++ {
		tenant, body, err := step(-1 - i)
		if err != nil {
			return nil, err
		}
		if err := c.pair(g, i, tenant, body); err != nil {
			return nil, err
		}
	}
	*r = result{format: r.format, size: r.size, mode: r.mode, conn: r.conn, results: r.results, tokens: map[string]int{}, notCompiled: map[string]int{}}
	stopProfiles := b.startProfiles(g, r)
	for i := 0; i < n; i++ {
		tenant, body, err := step(i)
		if err != nil {
			return nil, err
		}
		if err := c.pair(g, i, tenant, body); err != nil {
			return nil, err
		}
	}
	if err := stopProfiles(); err != nil {
		return nil, err
	}
	r.peakKB = statusKB(g.pid(), "VmHWM")
	r.finish()
	return r, nil
}

// caseRun is one case in progress: its shape, the receipts every request
// must carry, and the figures so far.
type caseRun struct {
	b       *bench
	ctx     context.Context
	sh      shape
	results int
	want    string // results, as the header's receipts field says it
	r       *result
}

func (c *caseRun) check(a answer, what string) error {
	if c.b.o.floor {
		if a.tt != "" {
			return fmt.Errorf("%s: Token-Terminator %q with -floor, want none", what, a.tt)
		}
		return nil
	}
	if !strings.HasPrefix(a.tt, "accepted;") || ttField(a.tt, "receipts") != c.want {
		return fmt.Errorf("%s: Token-Terminator %q, want accepted with receipts=%s", what, a.tt, c.want)
	}
	return nil
}

// pair times body through the gateway and straight to the sink, in the
// order i gives, and notes the figures.
func (c *caseRun) pair(g *gateway, i int, tenant string, body []byte) error {
	b, r, direct := c.b, c.r, "http://"+c.b.sink.addr
	var d, gwA answer
	var err error
	var ticks, faults int64
	gwReq := func() error {
		t0, f0, err := procStat(g.pid())
		if err != nil {
			return err
		}
		gwA, err = b.cl.post(c.ctx, g.url, c.sh.path, "Bearer "+tenant, body)
		if err != nil {
			return err
		}
		t1, f1, err := procStat(g.pid())
		ticks, faults = t1-t0, f1-f0
		return err
	}
	if i%2 == 1 {
		if d, err = b.cl.post(c.ctx, direct, c.sh.path, "Bearer direct", body); err != nil {
			return err
		}
	}
	if err := gwReq(); err != nil {
		return err
	}
	if i%2 == 0 {
		if d, err = b.cl.post(c.ctx, direct, c.sh.path, "Bearer direct", body); err != nil {
			return err
		}
	}
	// A request the gateway forwarded uncompiled (fail open: a compile
	// past compile_timeout on a loaded machine) got the right answer;
	// it is counted and reported, not an error.
	if c.check(gwA, "timed request") != nil {
		w, _, _ := strings.Cut(gwA.tt, ";")
		if w == "" {
			w = "no Token-Terminator header"
		}
		r.notCompiled[w]++
	}
	r.gw = append(r.gw, gwA.dur)
	r.direct = append(r.direct, d.dur)
	r.added = append(r.added, gwA.dur-d.dur)
	r.cpuTicks += ticks
	r.faults += faults
	r.tokens[tokenStatus(gwA.tt)]++
	sent := atoiOr(ttField(gwA.tt, "sent_bytes"))
	if b.o.floor {
		sent = len(body) // reverse_proxy alone sends the body as it came
	}
	r.sentBytes = max(r.sentBytes, sent)
	r.bodyBytes = len(body)
	return nil
}

// first runs the case of a gateway's first request after a start: a
// gateway restarted on the vault it already had (as an operator's restart
// or upgrade is). One untimed start fills it with a conversation first,
// so the samples measure the start of the process, not the creation of
// the vault's files.
func (c *caseRun) first() (*result, error) {
	b, ctx, sh, r := c.b, c.ctx, c.sh, c.r
	vaultDir, err := os.MkdirTemp(b.tmp, "vault-")
	if err != nil {
		return nil, err
	}
	g, err := startGateway(ctx, b.o.caddy, b.template, b.tmp, b.sink.addr, vaultDir)
	if err != nil {
		return nil, err
	}
	prev, body := b.nextConversation(sh, c.results)
	err = b.verify(ctx, g, sh, "sk-first-setup")
	if err == nil {
		_, err = b.cl.post(ctx, g.url, sh.path, "Bearer sk-first-setup", prev)
	}
	if err == nil {
		_, err = b.cl.post(ctx, g.url, sh.path, "Bearer sk-first-setup", body)
	}
	g.stop()
	if err != nil {
		return nil, err
	}
	for i := 0; i < b.o.firstN; i++ {
		prev, body := b.nextConversation(sh, c.results)
		g, err := startGateway(ctx, b.o.caddy, b.template, b.tmp, b.sink.addr, vaultDir)
		if err != nil {
			return nil, err
		}
		tenant := fmt.Sprintf("sk-first-%d", i)
		err = b.verify(ctx, g, sh, tenant)
		if err == nil {
			_, err = b.cl.post(ctx, g.url, sh.path, "Bearer "+tenant, prev)
		}
		if err == nil {
			err = c.pair(g, i, tenant, body)
		}
		r.peakKB = max(r.peakKB, statusKB(g.pid(), "VmHWM"))
		g.stop()
		if err != nil {
			return nil, fmt.Errorf("%w (caddy log: %s)", err, g.logPath)
		}
	}
	r.finish()
	return r, nil
}

// setup vaults and counts a conversation for tenant, until the tokenizer
// (built in the background at start) answers within the budget, and
// returns the conversation's next request. A first compile of a large
// body can pass the compile timeout on a loaded machine (the gateway then
// forwards the original): it is sent again, what it vaulted is kept.
func (c *caseRun) setup(g *gateway, tenant string) ([]byte, error) {
	b, ctx, sh := c.b, c.ctx, c.sh
	prev, body := b.nextConversation(sh, c.results)
	if err := b.verify(ctx, g, sh, tenant); err != nil {
		return nil, err
	}
	if _, err := b.cl.post(ctx, g.url, sh.path, "Bearer "+tenant, prev); err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		a, err := b.cl.post(ctx, g.url, sh.path, "Bearer "+tenant, body)
		if err != nil {
			return nil, err
		}
		err = c.check(a, "setup")
		if err == nil && ttField(a.tt, "tokens") != "budget" {
			return body, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("tokenizer not ready after two minutes: %q", a.tt)
			}
			return nil, err
		}
	}
}

// coldStep starts a new conversation of tenant: it sends its previous
// request, untimed, and returns the next one.
func (c *caseRun) coldStep(g *gateway, tenant string) (string, []byte, error) {
	prev, body := c.b.nextConversation(c.sh, c.results)
	if err := c.b.verify(c.ctx, g, c.sh, tenant); err != nil {
		return "", nil, err
	}
	if _, err := c.b.cl.post(c.ctx, g.url, c.sh.path, "Bearer "+tenant, prev); err != nil {
		return "", nil, err
	}
	if d := c.b.o.think; d > 0 {
		// What the gateway does between the two requests (work ahead on
		// the delivered results) is what a real session's answer time
		// leaves room for.
		select {
		case <-time.After(d):
		case <-c.ctx.Done():
			return "", nil, c.ctx.Err()
		}
	}
	return tenant, body, nil
}

func (r *result) finish() {
	r.when = time.Now().UTC()
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(data))
		if len(f) >= 3 {
			r.load = strings.Join(f[:3], " ")
		}
	}
}

// tokenStatus is the token gate's outcome in a Token-Terminator header:
// exact when the counts are there without a qualifier.
func tokenStatus(tt string) string {
	if s := ttField(tt, "tokens"); s != "" {
		return s
	}
	if ttField(tt, "raw_tokens") != "" {
		return "exact"
	}
	return "absent"
}

func atoiOr(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// startProfiles starts the CPU profile and the execution trace of the
// timed requests and snapshots the allocation, mutex and block profiles;
// the returned function waits for them and snapshots the three again.
func (b *bench) startProfiles(g *gateway, r *result) func() error {
	if b.o.profile == "" {
		return func() error { return nil }
	}
	base := filepath.Join(b.o.profile, fmt.Sprintf("%s-%s-%s-%s", r.format, r.size, r.mode, r.conn))
	snap := func(suffix string) error {
		for _, p := range []string{"allocs", "mutex", "block"} {
			if err := g.profile("/debug/pprof/"+p, base+"."+p+suffix+".pprof"); err != nil {
				return err
			}
		}
		return nil
	}
	if err := snap(".0"); err != nil {
		return func() error { return err }
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	secs := b.o.profileSeconds
	wg.Add(2)
	go func() {
		defer wg.Done()
		errs[0] = g.profile(fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), base+".cpu.pprof")
	}()
	go func() {
		defer wg.Done()
		errs[1] = g.profile(fmt.Sprintf("/debug/pprof/trace?seconds=%d", secs), base+".trace")
	}()
	return func() error {
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return snap(".1")
	}
}
