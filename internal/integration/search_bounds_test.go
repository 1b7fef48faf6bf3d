package integration

import (
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// processCPU is this process's user and system CPU time (Caddy runs in it).
func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A search of the artifact API with a 16 KB query over a large artifact is
// refused at once (400 invalid_request) instead of scanning the artifact
// once per query position; its CPU cost, the process's CPU time over the
// request, stays of the order of an ordinary search's. A query at the
// bound (256 characters) is answered.
func TestArtifactSearchQueryBoundThroughCaddy(t *testing.T) {
	p := newRecoveryProvider(t)
	g := startGateway(t, recoverySnippet, p.up)
	c := recoveryCases()[0]
	const cred = "Bearer sk-search-bound"
	// Step 2 vaults step 1's 400,000-character tool result.
	turns := fixtures.Turns(4100, 2, 400_000)
	for i := 1; i <= 2; i++ {
		logged := requestLines(g)
		if r := g.post(c.path, c.body(turns[:i]), "Authorization: "+cred); r.Status != 200 || (i == 2 && !strings.Contains(r.TT, "accepted")) {
			t.Fatalf("step %d: %d %s", i, r.Status, r.TT)
		}
		waitLogged(t, g, logged+1)
	}
	search := func(q string) (response, time.Duration) {
		before := processCPU(t)
		r := g.do(http.MethodGet, "/token-terminator/artifacts?q="+url.QueryEscape(q), nil, 0, "Authorization: "+cred)
		return r, processCPU(t) - before
	}
	ordinary, base := search("zzzz")
	if ordinary.Status != 200 {
		t.Fatalf("an ordinary search: %d %s", ordinary.Status, ordinary.Body)
	}
	long, cost := search(strings.Repeat("a", 16<<10))
	t.Logf("CPU: ordinary search %v, 16 KB query %v", base, cost)
	if long.Status != 400 || !strings.Contains(string(long.Body), "invalid_request") || !strings.Contains(string(long.Body), "256 characters") {
		t.Fatalf("a 16 KB query: %d %s", long.Status, long.Body)
	}
	if cost > 5*base+100*time.Millisecond {
		t.Fatalf("a refused query cost %v of CPU, an ordinary search %v", cost, base)
	}
	if r, _ := search(strings.Repeat("a", 255) + "z"); r.Status != 200 {
		t.Fatalf("a query at the bound: %d %s", r.Status, r.Body)
	}
}
