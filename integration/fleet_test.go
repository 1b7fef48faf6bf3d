//go:build unix

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/compiler"
	"github.com/tokenterminator/caddy-token-terminator/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/vault/redisvault"
	"github.com/tokenterminator/caddy-token-terminator/vault/redisvault/redistest"
)

// A fleet here is several sites of one in-process Caddy, each with its own
// token_terminator handler on the Redis vault. The App opens one store per
// vault key, so the sites spell the server's URL differently
// (redis://127.0.0.1:p/0, redis://127.0.0.1:p): each gets its own store and
// compiler (its own caches), as separate gateway processes would, and they
// share only what is in Redis.

const fleetTenantKey = "fleet-tenant-key-0123456789abcdef"

// fleetSite is one gateway of the fleet: its URL spelling, key prefix and
// tenant key.
type fleetSite struct {
	url, prefix, tenantKey string
}

func (s fleetSite) snippet() string {
	return fmt.Sprintf(`
	token_terminator {
		vault redis {
			url %s
			key_prefix %s
			op_timeout 500ms
		}
		tenant_key %s
	}
	reverse_proxy $UPSTREAM
`, s.url, s.prefix, s.tenantKey)
}

// startFleet loads one Caddy config with a site per fleetSite and returns
// a gateway per site, in order.
func startFleet(t *testing.T, up *upstream, sites ...fleetSite) []*gateway {
	t.Helper()
	first := startGateway(t, sites[0].snippet(), up)
	gs := []*gateway{first}
	cfg := gatewayConfig(first.port, first.LogFile, sites[0].snippet(), up.addr(), "")
	for _, s := range sites[1:] {
		g := *first
		g.port = freePort(t)
		g.URL = fmt.Sprintf("http://127.0.0.1:%d", g.port)
		gs = append(gs, &g)
		body := strings.ReplaceAll(s.snippet(), "$UPSTREAM", up.addr())
		cfg += fmt.Sprintf("\nhttp://127.0.0.1:%d {\n%s\n}\n", g.port, body)
	}
	first.load(cfg)
	return gs
}

// fleetStep is one request of a session.
type fleetStep struct {
	path string
	body []byte
}

// fleetSessions are the sessions a fleet test replays: a generated chat
// session and a generated Anthropic one (both with leases and folds), and
// the first step session of the shared corpus when it is present.
func fleetSessions(t *testing.T) map[string][]fleetStep {
	turns := compilertest.Turns(7100, 9, 9000)
	chat, msgs := []fleetStep{}, []fleetStep{}
	for i := 1; i <= len(turns); i++ {
		chat = append(chat, fleetStep{"/v1/chat/completions", compilertest.ChatBody("gpt-4o", turns[:i], "")})
		msgs = append(msgs, fleetStep{"/v1/messages", compilertest.AnthropicBody("claude-sonnet-4-5", turns[:i], "",
			compilertest.AnthropicOptions{System: true, Thinking: true, CacheLast: true})})
	}
	out := map[string][]fleetStep{"chat": chat, "anthropic": msgs}
	if dir, ok := compilertest.CorpusDir(); ok && !testing.Short() {
		files, err := compilertest.LoadCorpus(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if f.Format == "mixed" || len(f.Requests) < 3 {
				continue
			}
			var steps []fleetStep
			for _, r := range f.Requests {
				steps = append(steps, fleetStep{r.Path, r.Body})
			}
			out["corpus "+f.Name] = steps
			break
		}
	}
	return out
}

// run posts steps, step i to gs[i%len(gs)], and returns what the upstream
// received for each.
func runSteps(t *testing.T, up *upstream, auth string, steps []fleetStep, gs ...*gateway) [][]byte {
	t.Helper()
	var out [][]byte
	for i, s := range steps {
		resp := gs[i%len(gs)].post(s.path, s.body, auth, "anthropic-version: 2023-06-01")
		if resp.Status != http.StatusOK {
			t.Fatalf("step %d: status %d", i, resp.Status)
		}
		out = append(out, up.last(t).Body)
	}
	return out
}

var receiptIDRE = regexp.MustCompile(regexp.QuoteMeta(compiler.ReceiptPrefix) + `([0-9a-f]{32})`)

// receiptIDs returns the artifact ids named by receipts in bodies.
func receiptIDs(bodies ...[]byte) []string {
	seen := map[string]bool{}
	var ids []string
	for _, b := range bodies {
		for _, m := range receiptIDRE.FindAllStringSubmatch(string(b), -1) {
			id := "a_" + m[1]
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// logTenant is the tenant id the gateway logged for its last compiled
// request.
func logTenant(t *testing.T, g *gateway) string {
	t.Helper()
	lines := g.logLines()
	for i := len(lines) - 1; i >= 0; i-- {
		var l struct{ Tenant string }
		if json.Unmarshal([]byte(lines[i]), &l) == nil && l.Tenant != "" {
			return l.Tenant
		}
	}
	t.Fatal("no tenant logged")
	return ""
}

func openFleetStore(t *testing.T, url, prefix string) *redisvault.Store {
	t.Helper()
	st, err := redisvault.Open(context.Background(), redisvault.Config{URL: url, KeyPrefix: prefix, OpTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Two gateways sharing one Redis, requests of each session alternating
// between them, forward exactly the bytes one gateway forwards for the same
// session (a third site on its own key prefix), and every receipt either
// writes is recoverable through the other's view of the vault.
func TestFleet_TwoGatewaysForwardWhatOneWould(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes")
	up := newUpstream(t)
	a := fleetSite{srv.URL(), "fleet:", fleetTenantKey}
	b := fleetSite{strings.TrimSuffix(srv.URL(), "/0"), "fleet:", fleetTenantKey}
	single := fleetSite{srv.URL(), "single:", fleetTenantKey}
	gs := startFleet(t, up, a, b, single)
	ga, gb, gsingle := gs[0], gs[1], gs[2]

	storeB := openFleetStore(t, b.url, b.prefix)
	ctx := context.Background()
	n := 0
	for name, steps := range fleetSessions(t) {
		n++
		auth := fmt.Sprintf("Authorization: Bearer sk-fleet-%d", n)
		fleet := runSteps(t, up, auth, steps, ga, gb)
		tenant := logTenant(t, gb)
		one := runSteps(t, up, auth, steps, gsingle)
		if logTenant(t, gsingle) != tenant {
			t.Fatalf("%s: gateways of one tenant key computed different tenants", name)
		}
		receipts := 0
		for i := range steps {
			if string(fleet[i]) != string(one[i]) {
				t.Fatalf("%s step %d: the fleet forwarded %d bytes, one gateway %d", name, i, len(fleet[i]), len(one[i]))
			}
			receipts += strings.Count(string(fleet[i]), compiler.ReceiptPrefix)
		}
		ids := receiptIDs(fleet...)
		if receipts == 0 || len(ids) == 0 {
			t.Fatalf("%s: no receipts, the session does not exercise the shared vault", name)
		}
		for _, id := range ids {
			d, ok, err := storeB.Resolve(ctx, tenant, id)
			if err != nil || !ok {
				t.Fatalf("%s: receipt %s not resolvable through the other gateway's store: %v", name, id, err)
			}
			art, ok, err := storeB.Get(ctx, tenant, d)
			if err != nil || !ok || compiler.ArtifactID(art.Digest) != id {
				t.Fatalf("%s: artifact %s not readable: %v", name, id, err)
			}
		}
		t.Logf("%s: %d steps, %d receipts (%d artifacts), fleet bytes = single-gateway bytes", name, len(steps), receipts, len(ids))
	}
}
