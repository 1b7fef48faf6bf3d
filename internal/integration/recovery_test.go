package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery/recoverytest"
	respreader "github.com/tokenterminator/caddy-token-terminator/internal/response"
)

// recoveryProvider is a fake provider for the recovery loop: a request
// that carries a receipt gets the scripted model's answer (a
// token_terminator call until it holds `rounds` results, then the text it
// recovered); any other request gets plain text. It answers SSE when the
// request says "stream": true, and records every answer it sent.
type recoveryProvider struct {
	up *upstream

	mu       sync.Mutex
	rounds   int  // our tool's calls before the model answers
	mixed    bool // every answer also calls the client's bash tool
	failFU   bool // a request carrying our tool's results gets a 500
	answers  map[int][]byte
	statuses map[int]int
	// cache, when set, bills every request through a simulated prompt
	// cache per credential and reports its usage, as a real provider does.
	cache map[string]*cost.Simulator
	quiet bool // the model answers text, recovering nothing
}

var receiptIDRE = regexp.MustCompile(`\[Token Terminator artifact (a_[0-9a-f]{32})`)

func newRecoveryProvider(t *testing.T) *recoveryProvider {
	p := &recoveryProvider{up: newUpstream(t), rounds: 1, answers: map[int][]byte{}, statuses: map[int]int{}}
	p.up.respond = p.respond
	return p
}

func (p *recoveryProvider) set(rounds int, mixed, failFU bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rounds, p.mixed, p.failFU = rounds, mixed, failFU
}

func (p *recoveryProvider) respond(n int, w http.ResponseWriter) bool {
	rec := p.up.all()[n]
	format, _ := compiler.FormatFor(http.MethodPost, rec.Path)
	p.mu.Lock()
	defer p.mu.Unlock()
	stream := bytes.Contains(rec.Body, []byte(`"stream":true`))
	turn := recoverytest.Text("plain answer", provider.Usage{Input: 500, Output: 5, Known: true}).Echo(rec.Body)
	if m := receiptIDRE.FindSubmatch(rec.Body); m != nil && !p.quiet {
		if p.failFU && len(recoverytest.OwnResults(format, rec.Body)) > 0 {
			p.statuses[n] = http.StatusInternalServerError
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, `{"error":{"message":"overloaded"}}`)
			return true
		}
		t, err := recoverytest.Model{Format: format, ID: string(m[1]), Rounds: p.rounds, Mixed: p.mixed, PageChars: 20000}.Answer(rec.Body)
		if err != nil {
			p.statuses[n] = http.StatusBadRequest
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, strconv.Quote(err.Error())) // the body is the reason; the test fails on the status
			return true
		}
		turn = t
	}
	if p.cache != nil {
		turn = turn.WithUsage(p.bill(format, rec))
	}
	var out []byte
	if stream {
		w.Header().Set("Content-Type", "text/event-stream")
		out = turn.Stream(format, n)
	} else {
		out = turn.Body(format, n)
	}
	p.answers[n], p.statuses[n] = out, http.StatusOK
	// Flushed, so the answer is chunked like a real provider's: with a
	// Content-Length the client could hold the whole answer, and hang up,
	// before the gateway has finished (and committed) the request.
	http.NewResponseController(w).Flush()
	w.Write(out)
	return true
}

// bill runs a request through its credential's simulated prompt cache.
func (p *recoveryProvider) bill(format provider.Format, rec received) provider.Usage {
	var req struct{ Model string }
	_ = json.Unmarshal(rec.Body, &req)
	key := rec.Header.Get("Authorization")
	sim := p.cache[key]
	if sim == nil {
		sim = &cost.Simulator{Model: cost.Config{}.Model(format, req.Model)}
		p.cache[key] = sim
	}
	b := sim.Step(cost.Render(format, rec.Body), time.Now())
	u := provider.Usage{Input: int(b.Read + b.Written + b.Plain), CacheRead: int(b.Read), Output: 20, Known: true}
	if format == provider.Anthropic {
		u.CacheWrite = int(b.Written)
	}
	return u
}

// answer returns the n-th answer sent.
func (p *recoveryProvider) answer(n int) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.answers[n]
}

type recoveryCase struct {
	name, path string
	format     provider.Format
	stream     bool
}

func (c recoveryCase) body(turns []fixtures.ChatTurn) []byte {
	var b []byte
	switch c.format {
	case provider.Chat:
		b = fixtures.ChatBody("gpt-4o", turns, "")
	case provider.Responses:
		b = fixtures.ResponsesBody("gpt-4o", turns, "", fixtures.ResponsesOptions{})
	default:
		b = fixtures.AnthropicBody("claude-sonnet-4-5", turns, "", fixtures.AnthropicOptions{})
	}
	if c.stream {
		b = append([]byte(`{"stream":true,`), b[1:]...)
	}
	return b
}

func recoveryCases() []recoveryCase {
	var out []recoveryCase
	for _, f := range []struct {
		name   string
		format provider.Format
		path   string
	}{
		{"chat", provider.Chat, "/v1/chat/completions"},
		{"responses", provider.Responses, "/v1/responses"},
		{"anthropic", provider.Anthropic, "/v1/messages"},
	} {
		for _, stream := range []bool{false, true} {
			c := recoveryCase{name: f.name, format: f.format, path: f.path, stream: stream}
			if stream {
				c.name += "/stream"
			}
			out = append(out, c)
		}
	}
	return out
}

const recoverySnippet = `
	token_terminator {
		vault_dir $VAULT
		max_recovery_rounds 2
	}
	reverse_proxy $UPSTREAM
`

// readAnswer reads a client's answer with the response package.
func readAnswer(c recoveryCase, body []byte) *respreader.Reader {
	r := respreader.NewReader(c.format, respreader.Options{Stream: c.stream, Keep: []string{recovery.ToolName, "bash"}})
	r.Write(body)
	return r
}

// step2 runs a two-step conversation: step 1 delivers a large tool result
// inline, step 2 carries it as a receipt (and the tool). It returns the
// client's answer to step 2, the first turns and the index of step 2's
// upstream request.
func step2(t *testing.T, g *gateway, p *recoveryProvider, c recoveryCase, seed int, cred string) (response, []fixtures.ChatTurn, int) {
	t.Helper()
	turns := fixtures.Turns(seed, 2, 9000)
	logged := requestLines(g)
	if r := g.post(c.path, c.body(turns[:1]), "Authorization: "+cred); r.Status != 200 {
		t.Fatalf("step 1: %d %s", r.Status, r.Body)
	}
	waitLogged(t, g, logged+1)
	n := p.up.count()
	r := g.post(c.path, c.body(turns[:2]), "Authorization: "+cred)
	if r.Status != 200 {
		t.Fatalf("step 2: %d %s (%s)", r.Status, r.Body, r.TT)
	}
	waitLogged(t, g, logged+2)
	return r, turns, n
}

// assertNoOwnTool checks that the client's answer carries no trace of the
// gateway's tool.
func assertNoOwnTool(t *testing.T, c recoveryCase, body []byte) {
	t.Helper()
	if bytes.Contains(body, []byte(recovery.ToolName)) || bytes.Contains(body, []byte(`"tt_`)) {
		t.Fatalf("the client's answer shows the gateway's tool:\n%.600s", body)
	}
	if !c.stream && !json.Valid(body) {
		t.Fatalf("the client's answer is not JSON: %.300s", body)
	}
	if c.format == provider.Responses {
		// The provider echoes the tools it was sent in every response
		// object: the client sees the tools it sent, no more.
		want := toolNames(t, c.body(nil))
		echoes := echoedTools(t, c, body)
		if len(echoes) == 0 {
			t.Fatalf("no response object echoes tools: %.600s", body)
		}
		for _, e := range echoes {
			if got := toolNames(t, []byte(`{"tools":`+string(e)+`}`)); !slices.Equal(got, want) {
				t.Fatalf("the client's answer echoes tools %v, it sent %v", got, want)
			}
		}
	}
	if r := readAnswer(c, body); !r.Usage().Known {
		t.Fatalf("the client's answer is unreadable for its format: %.300s", body)
	}
}

// toolNames returns the names of the tools of a request body (or of an
// object holding an echoed tools array).
func toolNames(t *testing.T, body []byte) []string {
	t.Helper()
	var v struct{ Tools []struct{ Name string } }
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, tool := range v.Tools {
		names = append(names, tool.Name)
	}
	return names
}

// echoedTools returns the tools of every response object in a Responses
// answer: the JSON answer's, or those of each SSE event carrying one.
func echoedTools(t *testing.T, c recoveryCase, body []byte) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	if !c.stream {
		var v struct{ Tools json.RawMessage }
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatal(err)
		}
		if v.Tools != nil {
			out = append(out, v.Tools)
		}
		return out
	}
	for line := range bytes.SplitSeq(body, []byte("\n")) {
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		var v struct {
			Response *struct{ Tools json.RawMessage }
		}
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("event data is not JSON: %s", data)
		}
		if v.Response != nil && v.Response.Tools != nil {
			out = append(out, v.Response.Tools)
		}
	}
	return out
}

// A receipt the model asks for comes back exactly: the follow-up carries
// the vaulted content, the client gets the model's text with usage summed
// over the rounds and no trace of the tool.
func TestRecoveryRound(t *testing.T) {
	p := newRecoveryProvider(t)
	g := startGateway(t, recoverySnippet, p.up)
	for i, c := range recoveryCases() {
		t.Run(c.name, func(t *testing.T) {
			r, turns, n := step2(t, g, p, c, 1000+10*i, fmt.Sprintf("Bearer sk-round-%d", i))
			reqs := p.up.all()
			if len(reqs) != n+2 {
				t.Fatalf("upstream got %d requests for step 2, want 2 (the request and one follow-up); %s\n%.400s", len(reqs)-n, r.TT, r.Body)
			}
			fwd, fu := reqs[n].Body, reqs[n+1].Body
			if !receiptIDRE.Match(fwd) || !bytes.Contains(fwd, recovery.Definition(c.format)) {
				t.Fatalf("step 2 went upstream without a receipt or the tool:\n%.400s", fwd)
			}
			if !bytes.Contains(fwd, []byte(" | recover: token_terminator artifact_get]")) {
				t.Fatal("the receipt names no way to recover")
			}
			res := recoverytest.OwnResults(c.format, fu)
			var page recovery.Page
			if len(res) != 1 || json.Unmarshal([]byte(res[0]), &page) != nil || page.Content != turns[0].Output {
				t.Fatalf("the follow-up does not carry the exact vaulted content (%d results)", len(res))
			}
			assertNoOwnTool(t, c, r.Body)
			if !bytes.Contains(r.Body, []byte("recovered: ")) {
				t.Fatalf("the client did not get the final text:\n%.400s", r.Body)
			}
			var want provider.Usage
			for _, k := range []int{n, n + 1} {
				want = want.Add(readAnswer(c, p.answer(k)).Usage())
			}
			if got := readAnswer(c, r.Body).Usage(); got.Input != want.Input || got.Output != want.Output || got.CacheRead != want.CacheRead {
				t.Fatalf("usage %+v, want the rounds' sum %+v", got, want)
			}
			if !c.stream && !strings.Contains(r.TT, "recovery_rounds=1") {
				t.Fatalf("header %q lacks recovery_rounds=1", r.TT)
			}
			// The recovered artifact is needed: the next step carries it
			// inline again rather than as a receipt.
			n3 := p.up.count()
			r3 := g.post(c.path, c.body(append(turns, fixtures.Turns(1500+10*i, 1, 9000)...)), fmt.Sprintf("Authorization: Bearer sk-round-%d", i))
			id := firstReceiptID(t, fwd)
			if step3 := p.up.all()[n3].Body; bytes.Contains(step3, []byte(id)) {
				t.Fatalf("step 3 carries the recovered artifact %s as a receipt again (%s)", id, r3.TT)
			}
		})
	}
	if !logHas(g, `"recovery_rounds":1`) {
		t.Fatal("no log line with recovery_rounds=1")
	}
}

func requestLines(g *gateway) int {
	n := 0
	for _, l := range g.logLines() {
		if strings.Contains(l, `"msg":"request"`) {
			n++
		}
	}
	return n
}

// waitLogged waits until n request lines are logged: the client may hold
// a whole answer (its Content-Length reached) a moment before the gateway
// has committed the request's lineage, which the next step depends on.
func waitLogged(t *testing.T, g *gateway, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); requestLines(g) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("request %d was never logged", n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func logHas(g *gateway, s string) bool {
	for _, l := range g.logLines() {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// A model that keeps calling the tool is stopped at max_recovery_rounds;
// the client gets the last answer without our calls, valid for its format.
// Mixed with the client's own tool, ours are resolved and the client's call
// reaches the client.
func TestRecoveryRoundLimitAndMixedTools(t *testing.T) {
	p := newRecoveryProvider(t)
	g := startGateway(t, recoverySnippet, p.up)
	for i, c := range recoveryCases() {
		for _, mixed := range []bool{false, true} {
			name := c.name + "/limit"
			if mixed {
				name = c.name + "/mixed"
			}
			t.Run(name, func(t *testing.T) {
				rounds := 10
				if mixed {
					rounds = 1
				}
				p.set(rounds, mixed, false)
				defer p.set(1, false, false)
				seed := 2000 + 20*i
				if mixed {
					seed += 10
				}
				r, _, n := step2(t, g, p, c, seed, fmt.Sprintf("Bearer sk-limit-%d-%v", i, mixed))
				sent := p.up.count() - n
				want := 1 + 2 // the request and max_recovery_rounds follow-ups
				if mixed {
					want = 2
				}
				if sent != want {
					t.Fatalf("upstream got %d requests, want %d", sent, want)
				}
				assertNoOwnTool(t, c, r.Body)
				calls := readAnswer(c, r.Body).ToolCalls()
				if mixed != (len(calls) == 1 && calls[0].Name == "bash") {
					t.Fatalf("client tool calls %+v (mixed=%v)", calls, mixed)
				}
			})
		}
	}
}

// A failing recovery round costs the client nothing. Before anything
// reached the client (a JSON answer is held whole), the gateway sends the
// client's own request upstream unchanged and returns that answer; once a
// stream has started, it ends the stream well formed at what was delivered.
func TestRecoveryFailingRound(t *testing.T) {
	p := newRecoveryProvider(t)
	p.set(1, false, true)
	g := startGateway(t, recoverySnippet, p.up)
	for i, c := range recoveryCases() {
		t.Run(c.name, func(t *testing.T) {
			turns := fixtures.Turns(3000+10*i, 2, 9000)
			cred := fmt.Sprintf("Authorization: Bearer sk-fail-%d", i)
			logged := requestLines(g)
			g.post(c.path, c.body(turns[:1]), cred)
			waitLogged(t, g, logged+1)
			n := p.up.count()
			body := c.body(turns[:2])
			r := g.post(c.path, body, cred)
			reqs := p.up.all()[n:]
			want := 3 // compiled, failing follow-up, original
			if c.stream {
				want = 2
			}
			if len(reqs) != want {
				t.Fatalf("upstream got %d requests, want %d", len(reqs), want)
			}
			if r.Status != 200 {
				t.Fatalf("client got %d %.300s", r.Status, r.Body)
			}
			assertNoOwnTool(t, c, r.Body)
			if c.stream {
				if !bytes.Contains(r.Body, []byte(`"Lookin`)) {
					t.Fatalf("the delivered part of the stream is lost:\n%.600s", r.Body)
				}
				return
			}
			if !bytes.Equal(reqs[2].Body, body) {
				t.Fatal("the fallback is not the client's original body")
			}
			if !bytes.Contains(r.Body, []byte("plain answer")) {
				t.Fatalf("client got %.300s", r.Body)
			}
		})
	}
	if !logHas(g, `"recovery_fallback":"round_failed"`) || !logHas(g, "the client stream was ended where it was") {
		t.Fatal("the log does not name both failure cases")
	}
}

// The artifact API through Caddy: the caller's credential selects the
// tenant; pages are exact; another tenant's id, an unknown id and a
// malformed one get the same 404; nothing under the path is forwarded.
func TestRecoveryAPIThroughCaddy(t *testing.T) {
	p := newRecoveryProvider(t)
	g := startGateway(t, recoverySnippet, p.up)
	c := recoveryCases()[0]
	_, turns, n0 := step2(t, g, p, c, 4000, "Bearer sk-api-owner")
	id := firstReceiptID(t, p.up.all()[n0].Body)
	before := p.up.count()
	get := func(path, cred string) response {
		return g.do(http.MethodGet, path, nil, 0, "Authorization: "+cred)
	}
	var page recovery.Page
	r := get("/token-terminator/artifacts/"+id+"?offset=100&limit=50", "Bearer sk-api-owner")
	if r.Status != 200 || json.Unmarshal(r.Body, &page) != nil || page.Content != string([]rune(turns[0].Output)[100:150]) {
		t.Fatalf("page: %d %.300s", r.Status, r.Body)
	}
	g.verify(c.path, "Authorization: Bearer sk-api-other") // another verified tenant of the gateway
	other := get("/token-terminator/artifacts/"+id, "Bearer sk-api-other")
	unknown := get("/token-terminator/artifacts/a_00000000000000000000000000000000", "Bearer sk-api-owner")
	bad := get("/token-terminator/artifacts/../../etc", "Bearer sk-api-owner")
	for _, x := range []response{other, unknown} {
		if x.Status != 404 || !bytes.Equal(x.Body, other.Body) {
			t.Fatalf("404 sameness: %d %s vs %s", x.Status, x.Body, other.Body)
		}
	}
	if bad.Status == 200 {
		t.Fatalf("a malformed id was served: %s", bad.Body)
	}
	if p.up.count() != before {
		t.Fatal("an API request was forwarded upstream")
	}
}

// Once a conversation was sent the tool, every later forwarded request of
// it carries the identical tools array.
func TestRecoveryToolSticky(t *testing.T) {
	p := newRecoveryProvider(t)
	p.set(0, false, false) // the model never calls the tool
	g := startGateway(t, recoverySnippet, p.up)
	for i, c := range recoveryCases() {
		if c.stream {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			turns := fixtures.Turns(5000+10*i, 6, 9000)
			cred := fmt.Sprintf("Authorization: Bearer sk-sticky-%d", i)
			var first []byte
			for step := 1; step <= 6; step++ {
				n, logged := p.up.count(), requestLines(g)
				g.post(c.path, c.body(turns[:step]), cred)
				waitLogged(t, g, logged+1)
				fwd := p.up.all()[n].Body
				root, err := jsonv.Parse(fwd, jsonv.MaxDepth)
				if err != nil {
					t.Fatal(err)
				}
				var tools []byte
				if tn := root.Get("tools"); tn != nil {
					tools = tn.Raw(fwd)
				}
				switch {
				case step == 1:
					if bytes.Contains(tools, []byte(recovery.ToolName)) {
						t.Fatal("step 1 (no receipt) carries the tool")
					}
				case first == nil:
					first = append([]byte(nil), tools...)
					if !bytes.Contains(first, recovery.Definition(c.format)) {
						t.Fatalf("step %d: no tool: %s", step, tools)
					}
				case !bytes.Equal(first, tools):
					t.Fatalf("step %d: the tools array changed:\n%s\n%s", step, first, tools)
				}
			}
		})
	}
}

// An artifact the model recovered comes back inline on the next request
// (reinline_recovered on, the default), though the provider's prompt cache
// is warm and keeping the receipt would keep more of it: the model does not
// pay a recovery round for it again. In every format, plain and streamed.
func TestRecoveredArtifactInlineAgain(t *testing.T) {
	p := newRecoveryProvider(t)
	p.cache = map[string]*cost.Simulator{}
	g := startGateway(t, recoverySnippet, p.up)
	for i, c := range recoveryCases() {
		t.Run(c.name, func(t *testing.T) {
			cred := fmt.Sprintf("Authorization: Bearer sk-reinline-%d", i)
			body := func(turns []fixtures.ChatTurn) []byte {
				if c.format != provider.Anthropic {
					return c.body(turns)
				}
				// Anthropic caches only up to a breakpoint: the client marks
				// its newest message, as Claude Code does.
				b := fixtures.AnthropicBody("claude-sonnet-4-5", turns, "", fixtures.AnthropicOptions{CacheLast: true})
				if c.stream {
					b = append([]byte(`{"stream":true,`), b[1:]...)
				}
				return b
			}
			// A session of ten steps, each adding a result, in which the
			// model recovers the first result at step 10: re-inlining it
			// re-writes the whole cached prompt after it.
			turns := fixtures.Turns(4000+20*i, 11, 9000)
			id := ""
			logged := requestLines(g)
			for step := 1; step <= 11; step++ {
				p.mu.Lock()
				p.quiet = step != 10
				p.mu.Unlock()
				n := p.up.count()
				r := g.post(c.path, body(turns[:step]), cred)
				if r.Status != 200 {
					t.Fatalf("step %d: %d %s", step, r.Status, r.Body)
				}
				waitLogged(t, g, logged+step)
				fwd := p.up.all()[n].Body
				if step == 10 {
					id = vaultID(t, g, textPart(turns[0].Output, 100, 160), cred)
				}
				switch step {
				case 10:
					if !bytes.Contains(fwd, []byte(id)) || p.up.count() != n+2 {
						t.Fatalf("step 10 did not receipt %s and recover it (%d upstream requests; %s)", id, p.up.count()-n, r.TT)
					}
				case 11:
					if bytes.Contains(fwd, []byte(id)) || !bytes.Contains(fwd, jsonString(turns[0].Output)) {
						t.Fatalf("the request after the recovery carries the recovered artifact %s as a receipt again (%s)", id, r.TT)
					}
				}
			}
			p.mu.Lock()
			p.quiet = false
			p.mu.Unlock()
		})
	}
}
