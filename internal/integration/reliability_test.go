package integration

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/seal"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/badgervault"
)

// The operator checks of issue 12 as bounded integration tests: load,
// reload under load, and reloads that change settings without growing
// memory. Each runs for a few seconds through a real in-process Caddy and
// is skipped under -short.

// loadResult is what a load run saw.
type loadResult struct {
	requests, failed, invalid, accepted atomic.Int64
	resets                              atomic.Int64 // listener resets retried (see runLoad)
	mu                                  sync.Mutex
	sent                                map[string][]byte // X-Load-Id -> body the client sent
	errors                              []string
}

func (l *loadResult) fail(format string, args ...any) {
	l.failed.Add(1)
	l.mu.Lock()
	if len(l.errors) < 10 {
		l.errors = append(l.errors, fmt.Sprintf(format, args...))
	}
	l.mu.Unlock()
}

// runLoad runs clients agent conversations against g until the deadline:
// each step adds a large tool result and, every other step, re-reads an
// earlier one, so requests carry inline results, leases and duplicates.
//
// With retryResets a request whose connection was reset before any
// response is sent again (at most twice), as provider SDKs do: on a
// reload Caddy binds a new SO_REUSEPORT socket and closes the old one, and
// the kernel resets connections still queued on the old socket, before
// any server (or this module) read them, so the upstream never saw them.
// Such resets are counted apart; any other error fails the request.
func runLoad(g *gateway, clients int, d time.Duration, retryResets bool) *loadResult {
	res := &loadResult{sent: map[string][]byte{}}
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conv := newConversation("You are a coding agent. Use tools.", fmt.Sprintf("Task %d: fix the build.", c))
			var outs []string
			for step := 0; time.Now().Before(deadline); step++ {
				out := bigOutput(fmt.Sprintf("load-%d-%d", c, step), 9000)
				outs = append(outs, out)
				conv.tool("bash", fmt.Sprintf(`{"cmd":"cat f%d"}`, step), out)
				if step%2 == 1 {
					conv.tool("bash", `{"cmd":"cat again"}`, outs[step/2])
				}
				body := conv.body()
				id := fmt.Sprintf("%d-%d", c, step)
				res.mu.Lock()
				res.sent[id] = body
				res.mu.Unlock()
				res.requests.Add(1)
				var r response
				var err error
				for attempt := 0; ; attempt++ {
					r, err = g.try(http.MethodPost, chatPath, bytes.NewReader(body), int64(len(body)),
						"X-Load-Id: "+id, fmt.Sprintf("Authorization: Bearer sk-load-%d", c%4))
					if !retryResets || attempt == 2 || !listenerReset(err) {
						break
					}
					res.resets.Add(1)
				}
				switch {
				case err != nil:
					res.fail("%s: %v", id, err)
					time.Sleep(20 * time.Millisecond) // a gateway that is down: do not spin
				case r.Status != http.StatusOK:
					res.fail("%s: status %d", id, r.Status)
				case strings.Contains(r.TT, string(compiler.ReasonInvalidOutput)):
					res.invalid.Add(1)
				case strings.HasPrefix(r.TT, "accepted;"):
					res.accepted.Add(1)
				}
				conv.say("Done that.", "Next.")
			}
		}()
	}
	wg.Wait()
	return res
}

// checkForwarded checks every body the upstream received against what its
// client sent: the original itself, or a rewrite that passes the
// independent checker (receipts and folds exactly where allowed, the
// provider's rules kept).
func checkLoadForwarded(t *testing.T, up *upstream, res *loadResult) {
	t.Helper()
	checked := 0
	for _, got := range up.all() {
		id := got.Header.Get("X-Load-Id")
		sent, ok := res.sent[id]
		if !ok {
			t.Fatalf("upstream got a request no client sent (%q)", id)
		}
		if err := compiler.CheckCompactedKeyed(chatPath, sent, got.Body); err != nil {
			t.Fatalf("forwarded body of %s: %v", id, err)
		}
		if err := compiler.CheckRules(chatPath, got.Body); err != nil {
			t.Fatalf("forwarded body of %s breaks the provider's rules: %v", id, err)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("nothing forwarded")
	}
}

func reportLoad(t *testing.T, res *loadResult) {
	t.Helper()
	t.Logf("%d requests, %d accepted, %d failed, %d invalid rewrites, %d listener resets retried", res.requests.Load(), res.accepted.Load(), res.failed.Load(), res.invalid.Load(), res.resets.Load())
	if res.failed.Load() != 0 || res.invalid.Load() != 0 {
		t.Fatalf("%d failed requests, %d invalid rewrites: %v", res.failed.Load(), res.invalid.Load(), res.errors)
	}
	if res.accepted.Load() == 0 {
		t.Fatal("no request was compiled: the load tests nothing")
	}
}

// (a) Bounded load: 32 concurrent clients for 3 s, 0 failed requests, 0
// invalid rewrites, every forwarded body checked.
func TestReliabilityBoundedLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load")
	}
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	g.client.Timeout = 30 * time.Second
	res := runLoad(g, 32, 3*time.Second, false)
	reportLoad(t, res)
	checkLoadForwarded(t, up, res)
}

// (c) Reload under load: the config (token_budget, compile_timeout) is
// reloaded through the admin API every 150 ms while 16 clients send
// requests: 0 failed requests, every forwarded body checked.
func TestReliabilityReloadUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load")
	}
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	admin := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	config := func(i int) string {
		snippet := fmt.Sprintf(`
	token_terminator {
		vault_dir $VAULT
		token_budget %dms
		compile_timeout %dms
	}
	reverse_proxy $UPSTREAM
`, 200+i%7*10, 2000+i%3*100)
		return strings.Replace(gatewayConfig(g.port, g.LogFile, snippet, up.addr(), g.VaultDir), "admin off", "admin "+admin, 1)
	}
	g.load(config(0))
	g.client.Timeout = 30 * time.Second
	res := reloadsDuringLoad(t, g, admin, config)
	reportLoad(t, res)
	checkLoadForwarded(t, up, res)
}

// Reloads that change settings do not grow memory (issue 12, item 8): 100
// reloads, each changing token_budget (so each builds a new token counter
// and compiler and releases the old ones), with a compiled request after
// each. The heap after a collection may grow by at most 16 MB from reload
// 20 to reload 100 (the pools drop what the last config released; before,
// RSS grew by ~95 MB per 100 reloads).
func TestReliabilityReloadsDoNotGrowMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("100 reloads")
	}
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	out := bigOutput("reload-memory", 9000)
	step1, step2 := agentRun("List.", out)
	// Each new token counter builds its tokenizer tables in the background
	// (~20 MB); the heap is measured once the current config's are built
	// (the gate then reports a measured count, not tokens=budget), so both
	// measurements hold exactly one set.
	heap := func() uint64 {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			r := postRetryingResets(g, step2)
			if !strings.Contains(r.TT, "tokens=budget") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("tokenizer tables not built: %q", r.TT)
			}
		}
		var m runtime.MemStats
		for range 3 {
			runtime.GC()
		}
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var base uint64
	for i := range 100 {
		g.reload(fmt.Sprintf(`
	token_terminator {
		vault_dir $VAULT
		token_budget %dms
	}
	reverse_proxy $UPSTREAM
`, 100+i), up)
		for _, body := range [][]byte{step1, step2} {
			if r := postRetryingResets(g, body); r.Status != http.StatusOK {
				t.Fatalf("reload %d: status %d", i, r.Status)
			}
		}
		if i == 19 {
			base = heap()
		}
	}
	end := heap()
	t.Logf("heap after reload 20: %d bytes, after reload 100: %d bytes (%+d)", base, end, int64(end)-int64(base))
	if end > base+16<<20 {
		t.Fatalf("heap grew by %d bytes over 80 reloads", end-base)
	}
}

// postRetryingResets posts body, sending it again (at most twice) when a
// reload's listener handover reset the connection.
func postRetryingResets(g *gateway, body []byte) response {
	g.t.Helper()
	for attempt := 0; ; attempt++ {
		r, err := g.try(http.MethodPost, chatPath, bytes.NewReader(body), int64(len(body)))
		if err == nil {
			return r
		}
		if attempt == 2 || !listenerReset(err) {
			g.t.Fatalf("POST %s: %v", chatPath, err)
		}
	}
}

// (b) kill -9 under load: a real caddy process (cmd/caddy, built once) is
// killed with SIGKILL three times while 8 clients send requests, and
// restarted on the same vault after the first two. Then, with the process
// gone, the Badger vault is opened directly and every artifact named by a
// receipt the upstream saw must be there and read back intact, with the
// exact bytes its request carried: a receipt goes out only after its
// content is synced and read back. The load itself runs ~6 s; building the
// binary is outside that bound.
func TestReliabilityKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a caddy process")
	}
	tmp := t.TempDir()
	bin := caddyBinary(t)
	up := newUpstream(t)
	port := freePort(t)
	vaultDir := filepath.Join(tmp, "vault")
	cfg := filepath.Join(tmp, "Caddyfile")
	if err := os.WriteFile(cfg, []byte(gatewayConfig(port, filepath.Join(tmp, "caddy.log"), defaultSnippet, up.addr(), vaultDir)), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "run", "--config", cfg, "--adapter", "caddyfile")
		cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+filepath.Join(tmp, "data"), "XDG_CONFIG_HOME="+filepath.Join(tmp, "config"), "HOME="+tmp)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); ; {
			if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 100*time.Millisecond); err == nil {
				c.Close()
				return cmd
			}
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				t.Fatal("caddy did not start listening")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	g := &gateway{t: t, port: port, URL: fmt.Sprintf("http://127.0.0.1:%d", port),
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}}

	cmd := start()
	loaded := make(chan *loadResult)
	go func() { loaded <- runLoad(g, 8, 6*time.Second, false) }()
	for kill := 1; kill <= 3; kill++ {
		time.Sleep(1500 * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		if kill < 3 {
			cmd = start()
		}
	}
	res := <-loaded
	t.Logf("%d requests, %d accepted, %d failed (the process was killed under them)", res.requests.Load(), res.accepted.Load(), res.failed.Load())

	st, err := badgervault.Open(badgervault.Config{Dir: vaultDir})
	if err != nil {
		t.Fatalf("opening the vault after kill -9: %v", err)
	}
	defer st.Close()
	tenantKey, err := st.TenantKey(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, got := range up.all() {
		sent := res.sent[got.Header.Get("X-Load-Id")]
		tenant := st.Tenant(got.Header.Get("Authorization"))
		// Sealed under the request's data keys (encrypt on), which derive
		// from its credential and the vault's tenant key.
		ctx := seal.NewContext(t.Context(), fleetKeys(t, string(tenantKey), got.Header.Get("Authorization")))
		for _, m := range receiptRE.FindAllSubmatch(got.Body, -1) {
			id := "a_" + string(m[1])
			d, ok, err := st.Resolve(ctx, tenant, id)
			if err != nil || !ok {
				t.Fatalf("receipt %s forwarded before the kill is not in the vault (%v, %v)", id, ok, err)
			}
			a, ok, err := st.Get(ctx, tenant, d)
			if err != nil || !ok || !bytes.Contains(sent, a.Raw) {
				t.Fatalf("artifact %s: ok=%v err=%v, or its bytes are not its request's", id, ok, err)
			}
			checked++
		}
	}
	t.Logf("%d receipts recovered from the vault after 3 kills", checked)
	if checked == 0 || res.accepted.Load() == 0 {
		t.Fatal("no receipt went out: the test checks nothing")
	}
}

// Reloads that resize the open vault (issue 25, item 4): the admin API
// loads configs alternating max_bytes and tenant_max_bytes every 150 ms
// while 16 clients send requests; every reload succeeds (the limits change
// on the open vault, no restart), no request fails, and the last, lower
// tenant quota is in force at once: a tenant already over it gets its next
// new artifact refused (passthrough=vault_full; inside the retention
// window nothing of it may be evicted, and past it the vault evicts the
// tenant's own oldest down to the quota: vault.TestSetLimitsLowered).
func TestReliabilityReloadResizesVault(t *testing.T) {
	if testing.Short() {
		t.Skip("load")
	}
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	admin := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	config := func(maxBytes, tenantMax string) string {
		snippet := fmt.Sprintf(`
	token_terminator {
		vault badger {
			dir $VAULT
			max_bytes %s
			tenant_max_bytes %s
		}
	}
	reverse_proxy $UPSTREAM
`, maxBytes, tenantMax)
		return strings.Replace(gatewayConfig(g.port, g.LogFile, snippet, up.addr(), g.VaultDir), "admin off", "admin "+admin, 1)
	}
	sizes := [][2]string{{"512MiB", "128MiB"}, {"256MiB", "64MiB"}, {"384MiB", "96MiB"}}
	g.load(config(sizes[0][0], sizes[0][1]))
	g.client.Timeout = 30 * time.Second
	res := reloadsDuringLoad(t, g, admin, func(i int) string {
		s := sizes[i%len(sizes)]
		return config(s[0], s[1])
	})
	reportLoad(t, res)
	checkLoadForwarded(t, up, res)

	// The load's tenants hold tens of KB each; a quota of 16 KiB is below
	// that: their next new artifact does not fit.
	if err := postConfig(admin, config("256MiB", "16KiB")); err != nil {
		t.Fatalf("reload to a lower quota: %v", err)
	}
	var r response
	for attempt := 0; ; attempt++ {
		// A result sent again is vaulted (as in runLoad's odd steps).
		conv := newConversation("You are a coding agent. Use tools.", "Task 0: fix the build.")
		out := bigOutput(fmt.Sprintf("after-resize-%d", attempt), 9000)
		conv.tool("bash", `{"cmd":"cat fresh"}`, out)
		conv.tool("bash", `{"cmd":"cat fresh again"}`, out)
		body := conv.body()
		var err error
		r, err = g.try(http.MethodPost, chatPath, bytes.NewReader(body), int64(len(body)), "Authorization: Bearer sk-load-0")
		if err == nil || attempt == 2 || !listenerReset(err) {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if !strings.Contains(r.TT, "passthrough="+string(compiler.ReasonVaultFull)) {
		t.Fatalf("a tenant over the lowered quota: header %q, want passthrough=%s", r.TT, compiler.ReasonVaultFull)
	}
	if data, _ := os.ReadFile(g.LogFile); !bytes.Contains(data, []byte(`"msg":"vault limits changed"`)) {
		t.Error("no log line says the vault's limits changed")
	}
}

// postConfig loads the Caddyfile cfg through the admin API at admin.
func postConfig(admin, cfg string) error {
	req, _ := http.NewRequest(http.MethodPost, "http://"+admin+"/load", strings.NewReader(cfg))
	req.Header.Set("Content-Type", "text/caddyfile")
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return nil
}

// reloadsDuringLoad runs 16 clients of load against g for 4 s while config(i)
// is loaded through the admin API every 150 ms (i = 1, 2, …), and fails the
// test when any reload failed or fewer than 5 ran.
func reloadsDuringLoad(t *testing.T, g *gateway, admin string, config func(i int) string) *loadResult {
	t.Helper()
	stop := make(chan struct{})
	var reloads, failed atomic.Int64
	var firstErr atomic.Value
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(150 * time.Millisecond):
			}
			if err := postConfig(admin, config(i)); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Sprintf("reload %d: %v", i, err))
				continue
			}
			reloads.Add(1)
		}
	}()
	res := runLoad(g, 16, 4*time.Second, true)
	close(stop)
	<-done
	t.Logf("%d reloads, %d failed", reloads.Load(), failed.Load())
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d reloads failed; first: %v", n, firstErr.Load())
	}
	if reloads.Load() < 5 {
		t.Fatalf("only %d reloads during the load", reloads.Load())
	}
	return res
}
