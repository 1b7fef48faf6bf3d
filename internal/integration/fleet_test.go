//go:build unix

package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/seal"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/redisvault"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/redisvault/redistest"
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
		// Its own verified credentials: a site may have its own vault.
		g := gateway{t: first.t, VaultDir: first.VaultDir, LogFile: first.LogFile, client: first.client}
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
	turns := fixtures.Turns(7100, 9, 9000)
	chat, msgs := []fleetStep{}, []fleetStep{}
	for i := 1; i <= len(turns); i++ {
		chat = append(chat, fleetStep{"/v1/chat/completions", fixtures.ChatBody("gpt-4o", turns[:i], "")})
		msgs = append(msgs, fleetStep{"/v1/messages", fixtures.AnthropicBody("claude-sonnet-4-5", turns[:i], "",
			fixtures.AnthropicOptions{System: true, Thinking: true, CacheLast: true})})
	}
	out := map[string][]fleetStep{"chat": chat, "anthropic": msgs}
	if dir, ok := fixtures.CorpusDir(); ok && !testing.Short() {
		files, err := fixtures.LoadCorpus(dir)
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

// receiptIDs returns the artifact ids named by receipts in bodies.
func receiptIDs(bodies ...[]byte) []string {
	seen := map[string]bool{}
	var ids []string
	for _, b := range bodies {
		for _, m := range receiptIDRE.FindAllStringSubmatch(string(b), -1) {
			id := m[1] // receiptIDRE (recovery_test.go) captures "a_…"
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

// fleetKeys are the data keys a gateway with tenantKey derives for a
// request whose tenant secret is secret (its credential header's value, as
// the gateway's credential returns it).
func fleetKeys(t *testing.T, tenantKey, secret string) *seal.Keys {
	t.Helper()
	k, err := seal.Derive([]byte(tenantKey), secret)
	if err != nil {
		t.Fatal(err)
	}
	return k
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

	// Each gateway's view of the shared vault, read as the artifact API
	// reads it: with the data keys of the request's tenant.
	views := map[string]*redisvault.Store{"a": openFleetStore(t, a.url, a.prefix), "b": openFleetStore(t, b.url, b.prefix)}
	n := 0
	for name, steps := range fleetSessions(t) {
		n++
		secret := fmt.Sprintf("Bearer sk-fleet-%d", n)
		auth := "Authorization: " + secret
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
			receipts += strings.Count(string(fleet[i]), artifact.ReceiptPrefix)
		}
		ids := receiptIDs(fleet...)
		if receipts == 0 || len(ids) == 0 {
			t.Fatalf("%s: no receipts, the session does not exercise the shared vault", name)
		}
		keys := fleetKeys(t, fleetTenantKey, secret)
		ctx := seal.NewContext(context.Background(), keys)
		for view, st := range views {
			for _, id := range ids {
				d, ok, err := st.Resolve(ctx, tenant, id)
				if err != nil || !ok {
					t.Fatalf("%s: receipt %s not resolvable through gateway %s's store: %v", name, id, view, err)
				}
				// At rest the record is sealed: without the keys it does not open.
				if _, _, err := st.Get(context.Background(), tenant, d); !errors.Is(err, vault.ErrSealed) {
					t.Fatalf("%s: artifact %s read without keys through gateway %s's store: %v, want %v", name, id, view, err, vault.ErrSealed)
				}
				art, ok, err := st.Get(ctx, tenant, d)
				if err != nil || !ok {
					t.Fatalf("%s: artifact %s not readable through gateway %s's store: %v", name, id, view, err)
				}
				// The id is keyed: the tenant's id key over the content's identity.
				if got := artifact.ID(keys.ID(artifact.DigestOf(art.Text, art.Raw))); artifact.ID(art.Digest) != id || got != id {
					t.Fatalf("%s: receipt %s read back content whose keyed id is %s", name, id, got)
				}
			}
		}
		t.Logf("%s: %d steps, %d receipts (%d artifacts), fleet bytes = single-gateway bytes", name, len(steps), receipts, len(ids))
	}
}

// Redis killed mid-session: every request passes through unchanged with
// its reason (none fails); restarted, the gateways compile again without a
// reload, and the receipts written before the crash still name artifacts
// (appendonly, fsync always).
func TestFleet_RedisKilledAndRestarted(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	up := newUpstream(t)
	a := fleetSite{srv.URL(), "fleet:", fleetTenantKey}
	b := fleetSite{strings.TrimSuffix(srv.URL(), "/0"), "fleet:", fleetTenantKey}
	gs := startFleet(t, up, a, b)
	steps := fleetSessions(t)["chat"]
	const auth = "Authorization: Bearer sk-fleet-outage"

	before := runSteps(t, up, auth, steps[:4], gs...)
	tenant := logTenant(t, gs[1])
	ids := receiptIDs(before...)
	if len(ids) == 0 {
		t.Fatal("no receipts before the crash")
	}

	srv.Kill()
	logsBefore := len(gs[0].logLines())
	for i, s := range steps[4:7] {
		resp := gs[i%2].post(s.path, s.body, auth)
		if resp.Status != http.StatusOK {
			t.Fatalf("step %d with Redis down: status %d", 4+i, resp.Status)
		}
		if got := up.last(t).Body; string(got) != string(s.body) {
			t.Fatalf("step %d with Redis down: forwarded %d bytes, not the original %d", 4+i, len(got), len(s.body))
		}
		if !strings.HasPrefix(resp.TT, "passthrough=vault_error") {
			t.Fatalf("step %d with Redis down: header %q", 4+i, resp.TT)
		}
	}
	down := 0
	for _, l := range gs[0].logLines()[logsBefore:] {
		if strings.Contains(l, `"reason":"vault_error"`) {
			down++
		}
	}
	if down != 3 {
		t.Fatalf("%d requests logged with reason vault_error while Redis was down, want 3", down)
	}

	srv.Restart()
	// The first call on a connection the crash broke may fail; the next
	// dials anew. No reload.
	resumed := false
	for try := 0; try < 20 && !resumed; try++ {
		s := steps[7]
		resp := gs[try%2].post(s.path, s.body, auth)
		if resp.Status != http.StatusOK {
			t.Fatalf("after restart: status %d", resp.Status)
		}
		resumed = strings.HasPrefix(resp.TT, "accepted") && strings.Count(string(up.last(t).Body), artifact.ReceiptPrefix) > 0
		if !resumed {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if !resumed {
		t.Fatal("the gateways did not compile again after Redis came back")
	}
	st := openFleetStore(t, a.url, a.prefix)
	for _, id := range ids {
		if _, ok, err := st.Resolve(context.Background(), tenant, id); err != nil || !ok {
			t.Fatalf("receipt %s from before the crash names no artifact after the restart: %v", id, err)
		}
	}
}

// A replica whose tenant key differs computes other tenants for the same
// credential: it sees none of the fleet's artifacts or leases (it forwards
// what a gateway with an empty vault forwards), never a mix.
func TestFleet_OtherTenantKeyIsolated(t *testing.T) {
	srv := redistest.Start(t)
	up := newUpstream(t)
	const otherKey = "another-tenant-key-fedcba9876543210"
	a := fleetSite{srv.URL(), "fleet:", fleetTenantKey}
	other := fleetSite{strings.TrimSuffix(srv.URL(), "/0"), "fleet:", otherKey}
	fresh := fleetSite{srv.URL(), "fresh:", otherKey}
	gs := startFleet(t, up, a, other, fresh)
	steps := fleetSessions(t)["anthropic"]
	const auth = "X-Api-Key: sk-ant-fleet-isolation"

	fleet := runSteps(t, up, auth, steps, gs[0])
	tenant := logTenant(t, gs[0])
	ids := receiptIDs(fleet...)
	if len(ids) == 0 {
		t.Fatal("no receipts in the fleet's session")
	}
	// A small request (nothing to vault) names the replica's tenant for
	// this credential before it stores anything of its own.
	runSteps(t, up, auth, []fleetStep{{"/v1/messages", fixtures.AnthropicBody("claude-sonnet-4-5", nil, "hello", fixtures.AnthropicOptions{})}}, gs[1])
	otherTenant := logTenant(t, gs[1])
	if otherTenant == tenant {
		t.Fatal("different tenant keys computed the same tenant")
	}
	st := openFleetStore(t, a.url, a.prefix)
	ctx := context.Background()
	for _, id := range ids {
		d, ok, err := st.Resolve(ctx, tenant, id)
		if err != nil || !ok {
			t.Fatalf("fleet receipt %s not found in its own tenant: %v", id, err)
		}
		if _, ok, err := st.Resolve(ctx, otherTenant, id); ok || err != nil {
			t.Fatalf("fleet receipt %s resolves for the other tenant key's tenant (err %v)", id, err)
		}
		if _, ok, err := st.Get(ctx, otherTenant, d); ok || err != nil {
			t.Fatalf("fleet artifact %s visible to the other tenant key's tenant (err %v)", id, err)
		}
	}
	if hits, err := st.Search(ctx, otherTenant, "", 10); err != nil || len(hits) != 0 {
		t.Fatalf("the other tenant key's tenant finds %d artifacts (err %v)", len(hits), err)
	}
	seen := runSteps(t, up, auth, steps, gs[1])
	want := runSteps(t, up, auth, steps, gs[2])
	for i := range steps {
		if string(seen[i]) != string(want[i]) {
			t.Fatalf("step %d: the replica with another tenant key forwarded %d bytes, an empty vault %d", i, len(seen[i]), len(want[i]))
		}
	}
}

// BenchmarkFleetGateway1MB is BenchmarkGateway1MB{Warm,Cold} on the Redis
// vault (a local redis-server, no persistence), next to the same request
// on Badger: the cost of the vault's round trips over loopback.
func BenchmarkFleetGateway1MB(b *testing.B) {
	srv := redistest.Start(b)
	redisSnippet := fmt.Sprintf(`
	token_terminator {
		vault redis {
			url %s
		}
		tenant_key %s
	}
	reverse_proxy $UPSTREAM
`, srv.URL(), fleetTenantKey)
	for _, c := range []struct {
		name    string
		snippet string
		cold    bool
	}{
		{"badger/warm", defaultSnippet, false},
		{"redis/warm", redisSnippet, false},
		{"badger/cold", defaultSnippet, true},
		{"redis/cold", redisSnippet, true},
	} {
		b.Run(c.name, func(b *testing.B) { benchGateway1MBSite(b, c.snippet, c.cold) })
	}
}
