package integration

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// AWAITS THE REAL COMPILER AND VAULT.
//
// The tests in this file check that receipts appear where they must. They
// fail with the placeholder compiler (which always passes through) and pass
// once compiler.Compile, badgervault.Store and compiler.FormatFor are real.

// expectAccepted checks the header of a request whose rewrite was sent.
func expectAccepted(t testing.TB, r response, receipts int) {
	t.Helper()
	if r.Status != http.StatusOK {
		t.Fatalf("status %d: %s", r.Status, r.Body)
	}
	if !strings.HasPrefix(r.TT, "accepted;") || !strings.Contains(r.TT, fmt.Sprintf("; receipts=%d", receipts)) {
		t.Fatalf("Token-Terminator = %q, want accepted with receipts=%d", r.TT, receipts)
	}
}

// agentRun is a two-step agent conversation with one large tool result:
// step 1 delivers it, step 2 (a later request of the same conversation)
// repeats it.
func agentRun(user string, output string) (step1, step2 []byte) {
	c := newConversation("You are a coding agent. Use tools.", user).tool("bash", `{"cmd":"ls -laR"}`, output)
	step1 = c.body()
	c.say("I listed the repository.", "Now summarize it.")
	step2 = c.body()
	return
}

func TestCompiler_SecondExposureBecomesReceipt(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	out := bigOutput("second-exposure", 12000)
	step1, step2 := agentRun("List the repo.", out)

	r := g.post(chatPath, step1, "Authorization: Bearer A")
	expectSame(t, step1, up.last(t))
	expectPassthroughHeader(t, chatPath, r, "")

	r = g.post(chatPath, step2, "Authorization: Bearer A")
	expectAccepted(t, r, 1)
	got := up.last(t)
	expectReceipted(t, step2, got.Body, out)
	if got.ContentLength != int64(len(got.Body)) || len(got.Body) >= len(step2) {
		t.Fatalf("Content-Length %d for %d bytes (original %d)", got.ContentLength, len(got.Body), len(step2))
	}
	if !strings.Contains(r.TT, fmt.Sprintf("raw_bytes=%d; sent_bytes=%d;", len(step2), len(got.Body))) {
		t.Fatalf("header %q does not match the bytes sent", r.TT)
	}
}

func TestCompiler_SameRequestDuplicate(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	out := bigOutput("dup", 10000)
	c := newConversation("sys", "check twice").
		tool("bash", `{"cmd":"cat a"}`, out).
		tool("bash", `{"cmd":"cat a"}`, out)
	body := c.body()
	r := g.post(chatPath, body)
	expectAccepted(t, r, 1)
	// the older copy is receipted, the newest stays inline
	got := up.last(t).Body
	expectReceipted(t, body, got, out)
	first := bytes.Index(body, jsonString(out))
	if bytes.Index(got, jsonString(out)) <= first {
		t.Fatal("the older copy stayed inline instead of the newest")
	}
}

func TestCompiler_RetryCompilesIdentically(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	out := bigOutput("retry-same", 9500)
	step1, step2 := agentRun("List.", out)

	// a retried first step is still the first exposure
	g.post(chatPath, step1)
	g.post(chatPath, step1)
	reqs := up.all()
	expectSame(t, step1, reqs[0])
	expectSame(t, step1, reqs[1])

	r1 := g.post(chatPath, step2)
	a := up.last(t).Body
	r2 := g.post(chatPath, step2)
	b := up.last(t).Body
	expectAccepted(t, r1, 1)
	expectAccepted(t, r2, 1)
	if !bytes.Equal(a, b) {
		t.Fatal("a retried request compiled to different bytes")
	}
}

func TestCompiler_TenantsDoNotShareLeases(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	out := bigOutput("tenants", 9000)
	step1, step2 := agentRun("List.", out)

	g.post(chatPath, step1, "Authorization: Bearer tenant-A")
	// B never delivered the artifact: its step 2 must carry it inline.
	r := g.post(chatPath, step2, "Authorization: Bearer tenant-B")
	expectSame(t, step2, up.last(t))
	expectPassthroughHeader(t, chatPath, r, "")
	// x-api-key is a credential too, distinct from both
	r = g.post(chatPath, step2, "x-api-key: tenant-C")
	expectSame(t, step2, up.last(t))
	// A's step 2 is a second exposure
	r = g.post(chatPath, step2, "Authorization: Bearer tenant-A")
	expectAccepted(t, r, 1)
	expectReceipted(t, step2, up.last(t).Body, out)
}

func TestCompiler_ConversationsSharingOutputKeepOwnLeases(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	out := bigOutput("shared", 15000)
	x1, x2 := agentRun("Task X: list the repo.", out)
	y1, y2 := agentRun("Task Y: audit the repo.", out)

	g.post(chatPath, x1)
	r := g.post(chatPath, y1) // same output, other conversation: first exposure for Y
	expectSame(t, y1, up.last(t))
	expectPassthroughHeader(t, chatPath, r, "")

	r = g.post(chatPath, y2)
	expectAccepted(t, r, 1)
	expectReceipted(t, y2, up.last(t).Body, out)
	r = g.post(chatPath, x2)
	expectAccepted(t, r, 1)
	expectReceipted(t, x2, up.last(t).Body, out)
}

func TestCompiler_ReloadKeepsVault(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, defaultSnippet, up)
	out := bigOutput("reload", 9000)
	step1, step2 := agentRun("List.", out)
	g.post(chatPath, step1)

	// reload with a changed config naming the same vault_dir: the open
	// vault must be handed over, not reopened (Badger holds a lock).
	g.reload(`
	token_terminator {
		vault_dir $VAULT
		max_body_size 16MiB
	}
	reverse_proxy $UPSTREAM
`, up)
	r := g.post(chatPath, step2)
	expectAccepted(t, r, 1)
	expectReceipted(t, step2, up.last(t).Body, out)

	// and a second reload, back to the first config
	g.reload(defaultSnippet, up)
	r = g.post(chatPath, step2)
	expectAccepted(t, r, 1)
}

func TestCompiler_RestartKeepsVault(t *testing.T) {
	up := newUpstream(t)
	vault := t.TempDir()
	out := bigOutput("restart", 9000)
	step1, step2 := agentRun("List.", out)

	g := startGateway(t, defaultSnippet, up, vault)
	g.post(chatPath, step1)
	if err := stopCaddy(); err != nil {
		t.Fatal(err)
	}
	g = startGateway(t, defaultSnippet, up, vault)
	r := g.post(chatPath, step2)
	expectAccepted(t, r, 1)
	expectReceipted(t, step2, up.last(t).Body, out)
}

func TestCompiler_InlineLeasesZero(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, `
	token_terminator {
		vault_dir $VAULT
		inline_leases 0
	}
	reverse_proxy $UPSTREAM
`, up)
	step1, step2 := agentRun("List.", bigOutput("leases-off", 9000))
	g.post(chatPath, step1)
	r := g.post(chatPath, step2)
	expectSame(t, step2, up.last(t))
	expectPassthroughHeader(t, chatPath, r, "")
}

func TestCompiler_ShadowForwardsOriginal(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, `
	token_terminator {
		vault_dir $VAULT
		mode shadow
	}
	reverse_proxy $UPSTREAM
`, up)
	step1, step2 := agentRun("List.", bigOutput("shadow", 9000))
	g.post(chatPath, step1)
	r := g.post(chatPath, step2)
	expectSame(t, step2, up.last(t))
	if !strings.HasPrefix(r.TT, "shadow;") || !strings.Contains(r.TT, "; receipts=1") {
		t.Fatalf("Token-Terminator = %q, want shadow with receipts=1", r.TT)
	}
}

func TestCompiler_SessionScopesLeases(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, `
	token_terminator {
		vault_dir $VAULT
		session {http.request.header.X-Session-Id}
	}
	reverse_proxy $UPSTREAM
`, up)
	out := bigOutput("session", 9000)
	step1, step2 := agentRun("List.", out)
	g.post(chatPath, step1, "X-Session-Id: s1")
	r := g.post(chatPath, step2, "X-Session-Id: s2")
	expectSame(t, step2, up.last(t))
	expectPassthroughHeader(t, chatPath, r, "")
	r = g.post(chatPath, step2, "X-Session-Id: s1")
	expectAccepted(t, r, 1)
}

func TestCompiler_ConcurrentRequests(t *testing.T) {
	up := newUpstream(t)
	// Concurrency is under test, not speed: 32 compiles at once under -race
	// on a loaded 2-core machine can pass the default compile timeout and
	// token budget, which would report timeout or budget instead.
	g := startGateway(t, `
	token_terminator {
		vault_dir $VAULT
		compile_timeout 1m
		token_budget 1m
	}
	reverse_proxy $UPSTREAM
`, up)
	checkLeaks := goroutineBaseline(t, up)
	const n = 32
	var wg sync.WaitGroup
	errs := make(chan string, 2*n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			// half the runs share one tool output, half have their own
			seed := fmt.Sprintf("conc-%d", i)
			if i%2 == 0 {
				seed = "conc-shared"
			}
			out := bigOutput(seed, 9000+i)
			if i%2 == 0 {
				out = bigOutput(seed, 9000)
			}
			step1, step2 := agentRun(fmt.Sprintf("Run %d: list the repo.", i), out)
			auth := fmt.Sprintf("Authorization: Bearer tenant-%d", i%4)
			r := g.post(chatPath, step1, auth)
			if r.Status != http.StatusOK || strings.HasPrefix(r.TT, "accepted") {
				errs <- fmt.Sprintf("run %d step 1: status %d, %q", i, r.Status, r.TT)
			}
			r = g.post(chatPath, step2, auth)
			if r.Status != http.StatusOK || !strings.HasPrefix(r.TT, "accepted;") || !strings.Contains(r.TT, "receipts=1") {
				errs <- fmt.Sprintf("run %d step 2: status %d, %q", i, r.Status, r.TT)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	// every step-1 body arrived byte-identical, every step-2 body was smaller
	for _, rec := range up.all() {
		if rec.ContentLength != int64(len(rec.Body)) {
			t.Errorf("Content-Length %d for %d bytes", rec.ContentLength, len(rec.Body))
		}
	}
	checkLeaks()
}
