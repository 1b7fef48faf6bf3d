package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// codexFigures is what one Codex session cost at the provider.
type codexFigures struct {
	name     string
	requests int     // model requests billed (warm-ups left out)
	bytes    int     // bytes the provider received: WebSocket text messages, or HTTPS request bodies
	tokens   float64 // input tokens billed, the whole history of each request
	read     float64 // of which read from the prompt cache
	cost     float64 // cache-adjusted cost, in base-input-token units
	finals   []string
	script   []string
}

// billSession prices a session's whole request bodies, in order, through
// a fresh simulated prompt cache (cost.Simulator, the fake provider's),
// the requests 20 s apart so that the figure does not depend on how fast
// the machine ran the session. Each input item is priced as the model
// reads it (canonicalItems), so that the same history costs the same over
// either transport.
func billSession(bodies [][]byte) (tokens, read, total float64) {
	var sim *cost.Simulator
	for i, b := range bodies {
		b = canonicalItems(b)
		if sim == nil {
			var m struct{ Model string }
			_ = json.Unmarshal(b, &m)
			sim = &cost.Simulator{Model: cost.Config{}.Model(provider.Responses, m.Model)}
		}
		bill := sim.Step(cost.Render(provider.Responses, b), time.Unix(0, 0).Add(time.Duration(i)*20*time.Second))
		tokens += bill.Tokens
		read += bill.Read
		total += bill.Cost
	}
	return tokens, read, total
}

// canonicalItems returns body with each input item re-encoded without its
// id and status: a model output item comes back over the socket as the
// provider wrote it (previous_response_id) and over HTTPS as the client
// re-serialises it, while the model reads the same item either way.
func canonicalItems(body []byte) []byte {
	var m map[string]json.RawMessage
	var items []map[string]any
	if json.Unmarshal(body, &m) != nil || json.Unmarshal(m["input"], &items) != nil {
		return body
	}
	for _, it := range items {
		delete(it, "id")
		delete(it, "status")
	}
	m["input"] = marshalNoEscape(items)
	return marshalNoEscape(m)
}

// wsFigures measures a session over the Responses WebSocket.
func wsFigures(name string, r codexWSRun) codexFigures {
	all, _ := r.wireBytes()
	wholes := r.ws.wholeBodies()
	f := codexFigures{name: name, requests: len(wholes), bytes: all, finals: r.finals, script: r.prov.script()}
	f.tokens, f.read, f.cost = billSession(wholes)
	return f
}

// httpsFigures runs the session with Codex configured as a custom
// provider (HTTPS, SSE, the whole input in every request), directly when
// snippet is empty, else through Caddy, and measures it.
func httpsFigures(ctx context.Context, t *testing.T, bin, name, snippet string) codexFigures {
	dir := t.TempDir()
	writeAgentFiles(t, dir)
	prov := newAgentProvider(t, agentTasks, codexDialect{})
	base := prov.URL
	if snippet != "" {
		g := startGateway(t, snippet, prov.upstream)
		g.verify("/v1/responses", "Authorization: Bearer sk-test-agents-codex")
		base = g.URL
	}
	finals, err := runCodex(ctx, t, bin, base, dir)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	f := codexFigures{name: name, finals: finals, script: prov.script()}
	var bodies [][]byte
	for _, r := range prov.all() {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.Path, "/responses") {
			continue
		}
		f.bytes += len(r.Body)
		bodies = append(bodies, r.Body)
		if err := compiler.CheckRules(r.Path, r.Body); err != nil {
			t.Errorf("%s: a request breaks the Responses rules: %v", name, err)
		}
	}
	f.requests = len(bodies)
	f.tokens, f.read, f.cost = billSession(bodies)
	return f
}

// TestCodexTransportFigures runs the scripted ten-task Codex session five
// ways and logs the bytes and the cache-adjusted cost at the provider:
// Codex's default (the built-in provider, Responses WebSocket) directly,
// through Caddy with the recovery API only, and through Caddy with the
// default recovery tool (the model recovering receipts over the socket);
// Codex configured as a custom provider (HTTPS) directly and through
// Caddy with the defaults. Each session through Caddy must finish as its
// direct one did. The figures are for the closing notes:
//
//	go test ./internal/integration -run '^TestCodexTransportFigures$' -v
func TestCodexTransportFigures(t *testing.T) {
	bin := codexWSBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 420*time.Second)
	defer cancel()
	ws := func(name, snippet string, recovering *wsRecovering) codexFigures {
		r, err := runCodexWS(ctx, t, bin, snippet, recovering)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i, b := range r.ws.wholeBodies() {
			if err := compiler.CheckRules("/v1/responses", b); err != nil {
				t.Errorf("%s: whole history %d breaks the Responses rules: %v", name, i, err)
			}
		}
		return wsFigures(name, r)
	}
	wsDirect := ws("WebSocket, direct", "", nil)
	if wsDirect.bytes == 0 {
		t.Skip("Codex sent nothing over the WebSocket (it fell back to HTTPS)")
	}
	wsAPI := ws("WebSocket, gateway (recovery api)", wsSnippet, nil)
	recovering := &wsRecovering{max: 2}
	wsTool := ws("WebSocket, gateway (recovery tool)", defaultSnippet, recovering)
	httpsDirect := httpsFigures(ctx, t, bin, "HTTPS custom provider, direct", "")
	httpsGW := httpsFigures(ctx, t, bin, "HTTPS custom provider, gateway", agentSnippet)

	for _, p := range [][2]codexFigures{{wsDirect, wsAPI}, {wsDirect, wsTool}, {httpsDirect, httpsGW}} {
		if strings.Join(p[1].finals, "\x00") != strings.Join(p[0].finals, "\x00") {
			t.Errorf("%s finished differently from %s", p[1].name, p[0].name)
		}
		if strings.Join(p[1].script, ",") != strings.Join(p[0].script, ",") {
			t.Errorf("%s followed the script %v, %s %v", p[1].name, p[1].script, p[0].name, p[0].script)
		}
	}
	t.Logf("Codex %s, %d tasks; cost in base-input-token units (cache reads at the model's discount), requests 20 s apart:", codexPackage, len(agentTasks))
	row := func(f, base codexFigures) {
		t.Logf("  %-36s %3d requests  %9d bytes (%+6.1f%%)  %9.0f input tokens, %9.0f cached  cost %9.0f (%+6.1f%%)",
			f.name, f.requests, f.bytes, pct(f.bytes, base.bytes), f.tokens, f.read, f.cost, 100*(f.cost/base.cost-1))
	}
	row(wsDirect, wsDirect)
	row(wsAPI, wsDirect)
	row(wsTool, wsDirect)
	row(httpsDirect, httpsDirect)
	row(httpsGW, httpsDirect)
	t.Logf("  the recovering model read %d receipts over the socket: %s", len(recovering.recovered()), strings.Join(recovering.recovered(), ", "))
	t.Logf("  HTTPS direct against WebSocket direct: %+.1f%% bytes, %+.1f%% cost", pct(httpsDirect.bytes, wsDirect.bytes), 100*(httpsDirect.cost/wsDirect.cost-1))
}

func pct(a, b int) float64 { return 100 * (float64(a)/float64(b) - 1) }
