package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// Pinned client versions: what docs/notes describe (Claude Code 2.1.x,
// Codex 0.17x). Bump together with the notes.
const (
	claudeCodePackage = "@anthropic-ai/claude-code@2.1.332"
	codexPackage      = "@openai/codex@0.171.0"
)

// agentFiles are the files of the work directory the agents read: large
// (over 20 KB each, so every read is well above min_artifact_chars) and
// generated, so the test needs no fixture.
var agentFiles = []string{"a.txt", "b.txt", "c.txt"}

// editedLine is the line of a.txt the agent edits, and its replacement.
var editedLine, editedTo = agentFileLine("a.txt", 100), "a.txt line 0100: edited by the agent"

// agentTasks is the session: large reads, a command, parallel reads,
// re-reads of unchanged files, an edit and text-only turns; ten turns, so
// that compaction folds the oldest ones.
var agentTasks = []agentTask{
	{taskTag(1) + " Read a.txt and count its bytes.", [][]agentAction{{{kind: actRead, file: "a.txt"}}, {{kind: actShell, cmd: "wc -c a.txt"}}}},
	{taskTag(2) + " Read b.txt and c.txt.", [][]agentAction{{{kind: actRead, file: "b.txt"}, {kind: actRead, file: "c.txt"}}}},
	{taskTag(3) + " Read a.txt again.", [][]agentAction{{{kind: actRead, file: "a.txt"}}}},
	{taskTag(4) + " Change line 100 of a.txt.", [][]agentAction{{{kind: actEdit, file: "a.txt", old: editedLine, new: editedTo}}}},
	{taskTag(5) + " How many lines does b.txt have?", [][]agentAction{{{kind: actShell, cmd: "grep -c line b.txt"}}}},
	{taskTag(6) + " Read c.txt again.", [][]agentAction{{{kind: actRead, file: "c.txt"}}}},
	{taskTag(7) + " Show the start of b.txt.", [][]agentAction{{{kind: actShell, cmd: "head -c 12000 b.txt"}}}},
	{taskTag(8) + " Summarize what you did.", nil},
	{taskTag(9) + " Read b.txt once more.", [][]agentAction{{{kind: actRead, file: "b.txt"}}}},
	{taskTag(10) + " Anything left?", nil},
}

// reReadTask is the task whose read repeats an earlier read of the same
// unchanged file (a.txt, first read in task 1).
const reReadTask, reReadFile = 3, "a.txt"

// agentFileLine is line n of a generated file: it names its file and line,
// so "a.txt line 0170:" occurs once per copy of a.txt.
func agentFileLine(name string, n int) string {
	words := []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"}
	var b strings.Builder
	fmt.Fprintf(&b, "%s line %04d:", name, n)
	for i := 0; b.Len() < 60; i++ {
		b.WriteString(" " + words[(n*7+i*3+len(name))%len(words)])
	}
	return b.String()
}

func writeAgentFiles(t *testing.T, dir string) {
	t.Helper()
	for _, name := range agentFiles {
		var b strings.Builder
		for n := 1; n <= 340; n++ {
			b.WriteString(agentFileLine(name, n) + "\n")
		}
		if b.Len() < 20<<10 {
			t.Fatalf("%s is only %d bytes", name, b.Len())
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// fileMarker occurs once in every whole copy of the file's content: a line
// from the middle, which a client that truncates long output (keeping head
// and tail) would drop.
func fileMarker(name string) []byte { return []byte(name + " line 0170:") }

// agentOutcome is how a client session ended, comparable between a direct
// run and one through the gateway.
type agentOutcome struct {
	Finals []string          // each task's final result as the client reported it
	Script []string          // the scripted steps the provider answered, in order
	Files  map[string]string // sha256 of each work file afterwards
}

// agentClient is one real agent CLI and how the test drives a session.
type agentClient struct {
	name    string
	dialect func(workdir string) agentDialect
	// run drives the whole session against baseURL (the provider or the
	// gateway) and returns each task's final result.
	run func(ctx context.Context, t *testing.T, bin, baseURL, workdir string) ([]string, error)
	// premise checks a scripted request the client sent has the shape the
	// test is about (what real-clients.md describes).
	premise func(body []byte) error
	// verify is the path and credential header of the client's requests,
	// which the provider accepts once before the session (gateway.verify).
	verify [2]string
	// timeout bounds one session; 0 means 90 s.
	timeout time.Duration
	// check, when set, checks what the client's format needs beyond the
	// checker on the live session's requests.
	check func(t *testing.T, taps []tapped, fwd map[int]forwarded)
}

var agentClients = []agentClient{
	{name: "ClaudeCode", dialect: func(w string) agentDialect { return claudeDialect{workdir: w} }, run: runClaudeCode, premise: claudePremise, verify: [2]string{"/v1/messages", "X-Api-Key: sk-ant-test-agents"}},
	{name: "Codex", dialect: func(string) agentDialect { return codexDialect{} }, run: runCodex, premise: codexPremise, verify: [2]string{"/v1/responses", "Authorization: Bearer sk-test-agents-codex"}},
}

// TestAgentCLIs drives the real Claude Code and Codex CLIs over a ten-turn
// session through Caddy with the module to a scripted fake provider, and
// once directly to the provider. The client must finish exactly as it does
// directly; every forwarded body must pass the checker; the preamble
// (tools, system and the client's session context) must reach the provider
// byte-identical in every request; no request may fail. A transparent tap
// in front of Caddy keeps each body as the client sent it.
//
// The bodies the tap recorded are then replayed through fresh gateways:
// with the defaults they must compile to the same bytes (determinism), and
// with context_compaction off they give the second set of figures.
//
// Skipped with -short or when npm or a CLI cannot run. The npm install is
// cached under $TT_NPM_CACHE or os.UserCacheDir().
func TestAgentCLIs(t *testing.T) {
	needNode(t, "agent CLI test")
	bin := filepath.Join(npmInstall(t, "token-terminator-agents-test", claudeCodePackage, codexPackage), ".bin")
	for _, cli := range []string{"claude", "codex"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, filepath.Join(bin, cli), "--version")
		cmd.Env = cliEnv(t.TempDir())
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		cancel()
		if err != nil {
			t.Skipf("the %s CLI installed by npm cannot run here: %v\n%s%s", cli, err, out, stderr.Bytes())
		}
		t.Logf("%s", bytes.TrimSpace(out))
	}
	// All four sessions share one deadline (each takes 5-30 s), so that a
	// hanging client cannot hold the test for long.
	ctx, cancel := context.WithTimeout(context.Background(), 170*time.Second)
	defer cancel()
	for _, c := range agentClients {
		t.Run(c.name, func(t *testing.T) { testAgentClient(ctx, t, c, bin) })
	}
}

func testAgentClient(ctx context.Context, t *testing.T, c agentClient, bin string) {
	// Directly to the provider: what the client does without the gateway.
	directDir := t.TempDir()
	writeAgentFiles(t, directDir)
	direct := newAgentProvider(t, agentTasks, c.dialect(directDir))
	want := driveAgent(ctx, t, c, bin, direct.URL, directDir, direct)

	// Through the gateway, with a tap in front keeping the originals.
	gwDir := t.TempDir()
	writeAgentFiles(t, gwDir)
	prov := newAgentProvider(t, agentTasks, c.dialect(gwDir))
	g := startGateway(t, agentSnippet, prov.upstream)
	g.verify(c.verify[0], c.verify[1])
	tp := newTap(t, g.URL)
	got := driveAgent(ctx, t, c, bin, tp.URL, gwDir, prov)

	if !reflect.DeepEqual(got, want) {
		t.Errorf("through the gateway the client ended differently\n got: %+v\nwant: %+v", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(gwDir, "a.txt")); err != nil || !bytes.Contains(b, []byte(editedTo+"\n")) || bytes.Contains(b, []byte(editedLine)) {
		t.Errorf("the edit was not applied through the gateway (%v)", err)
	}

	taps := tp.all()
	fwd := prov.bySeq()
	for _, r := range taps {
		if fwd[r.Seq].Answer == sideRequest {
			continue
		}
		if err := c.premise(r.Body); err != nil {
			t.Errorf("request %d: %v", r.Seq, err)
		}
	}
	for _, r := range taps {
		if r.Status != http.StatusOK {
			t.Errorf("request %d %s %s failed through the gateway: status %d", r.Seq, r.Method, r.Path, r.Status)
		}
	}
	live := checkAgentSession(t, "live", taps, fwd, true)
	// With compaction on, the compiler pins the client's session context
	// when it folds the first turn.
	checkPreamble(t, "live", taps, fwd)
	checkBenefits(t, c, taps, fwd)
	if c.check != nil {
		c.check(t, taps, fwd)
	}

	// Replays of the recorded originals through fresh vaults of the same
	// tenant key (as a restart or another gateway of the fleet): artifact
	// ids are keyed by it, so the same key must give the same bytes.
	replay := func(snippet string) map[int]forwarded {
		rp := newAgentProvider(t, agentTasks, c.dialect(gwDir))
		g.VaultDir = t.TempDir()
		g.reload(snippet, rp.upstream)
		for _, r := range taps {
			if r.Method != "POST" || !isCandidate(r.Path) {
				continue
			}
			hs := []string{fmt.Sprintf("%s: %d", seqHeader, r.Seq)}
			for _, k := range []string{"Authorization", "X-Api-Key", "X-Goog-Api-Key", "Anthropic-Version", "Anthropic-Beta"} {
				if v := r.Header.Get(k); v != "" {
					hs = append(hs, k+": "+v)
				}
			}
			if resp := g.post(r.Path, r.Body, hs...); resp.Status != 200 {
				t.Errorf("replay %d %s: status %d", r.Seq, r.Path, resp.Status)
			}
		}
		return rp.bySeq()
	}
	again := replay(agentSnippet)
	for _, r := range taps {
		if r.Method != "POST" || !isCandidate(r.Path) {
			continue
		}
		if a, ok := again[r.Seq]; !ok {
			t.Errorf("request %d: the replay never reached the provider", r.Seq)
		} else if !bytes.Equal(a.Body, fwd[r.Seq].Body) {
			t.Errorf("request %d: a replay through a fresh gateway forwarded different bytes (%d vs %d)", r.Seq, len(a.Body), len(fwd[r.Seq].Body))
		}
	}
	offFwd := replay(agentOffSnippet)
	off := checkAgentSession(t, "compaction off", taps, offFwd, false)
	checkPreamble(t, "compaction off", taps, offFwd)

	t.Logf("%s, %d turns, %d requests (%d scripted):", c.name, len(agentTasks), len(taps), len(got.Script))
	t.Logf("  defaults:       %s", live)
	t.Logf("  compaction off: %s", off)
}

// driveAgent runs one session with a bounded time and returns its outcome.
func driveAgent(ctx context.Context, t *testing.T, c agentClient, bin, baseURL, workdir string, prov *agentProvider) agentOutcome {
	t.Helper()
	limit := 90 * time.Second
	if c.timeout > 0 {
		limit = c.timeout
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	finals, err := c.run(ctx, t, bin, baseURL, workdir)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	out := agentOutcome{Finals: finals, Script: prov.script(), Files: map[string]string{}}
	for _, name := range agentFiles {
		b, err := os.ReadFile(filepath.Join(workdir, name))
		if err != nil {
			t.Fatal(err)
		}
		s := sha256.Sum256(b)
		out.Files[name] = hex.EncodeToString(s[:])
	}
	if want := scriptedSteps(); !reflect.DeepEqual(out.Script, want) {
		var seen []string
		prov.mu.Lock()
		for i, r := range prov.reqs {
			seen = append(seen, fmt.Sprintf("%s %s %d bytes: %s", r.Method, r.Path, len(r.Body), prov.answers[i]))
		}
		prov.mu.Unlock()
		t.Fatalf("%s did not follow the script:\n got %v\nwant %v\nrequests:\n%s", c.name, out.Script, want, strings.Join(seen, "\n"))
	}
	return out
}

// scriptedSteps is every step of the session in order.
func scriptedSteps() []string {
	var out []string
	for i, tk := range agentTasks {
		for s := 0; s <= len(tk.steps); s++ {
			out = append(out, fmt.Sprintf("t%ds%d", i+1, s))
		}
	}
	return out
}

// cliEnv is a minimal environment for a CLI: nothing of the host's
// provider settings or keys, a private HOME.
func cliEnv(home string, extra ...string) []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LANG=C.UTF-8", "TERM=dumb"}, extra...)
}

// runClaudeCode drives Claude Code non-interactively: one process, each
// task a stream-json user message sent when the previous task's result
// arrives (messages queued while it works would be merged into one turn),
// thinking on (its default).
func runClaudeCode(ctx context.Context, t *testing.T, bin, baseURL, workdir string) ([]string, error) {
	prompts := make([]string, len(agentTasks))
	for i, task := range agentTasks {
		prompts[i] = task.prompt
	}
	finals, _, err := runClaude(ctx, t, bin, baseURL, workdir, prompts)
	return finals, err
}

// runClaude drives one Claude Code process through prompts, one task
// each, and returns each task's final result and everything it printed.
func runClaude(ctx context.Context, t *testing.T, bin, baseURL, workdir string, prompts []string) ([]string, string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "claude"), "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions")
	cmd.Dir = workdir
	cmd.Env = cliEnv(t.TempDir(),
		"ANTHROPIC_BASE_URL="+baseURL, "ANTHROPIC_API_KEY=sk-ant-test-agents",
		"IS_SANDBOX=1", // as root, --dangerously-skip-permissions needs it
		"DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	var stderr, seen bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	send := func(i int) {
		line, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": prompts[i]}})
		_, _ = stdin.Write(append(line, '\n'))
	}
	send(0)
	var finals []string
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		seen.Write(append(sc.Bytes(), '\n'))
		var ev struct {
			Type    string `json:"type"`
			Subtype string `json:"subtype"`
			IsError bool   `json:"is_error"`
			Result  string `json:"result"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Type != "result" {
			continue
		}
		finals = append(finals, fmt.Sprintf("%s error=%v: %s", ev.Subtype, ev.IsError, ev.Result))
		if len(finals) < len(prompts) {
			send(len(finals))
		} else {
			stdin.Close()
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil || len(finals) != len(prompts) {
		return nil, seen.String(), fmt.Errorf("claude: %v; %d results for %d tasks\nstderr: %s\nstdout tail: %s", err, len(finals), len(prompts), stderr.String(), tail(seen.String(), 3000))
	}
	return finals, seen.String(), nil
}

// claudePremise: thinking is on (Claude Code's default) and so, with it,
// is context_management.
func claudePremise(body []byte) error {
	var req struct {
		Thinking *struct {
			Type string `json:"type"`
		} `json:"thinking"`
		ContextManagement json.RawMessage `json:"context_management"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return err
	}
	if req.Thinking == nil || req.Thinking.Type == "disabled" || len(req.ContextManagement) == 0 {
		return fmt.Errorf("Claude Code sent no thinking or no context_management")
	}
	return nil
}

// codexPremise: the whole history goes in every request (no
// previous_response_id), streamed.
func codexPremise(body []byte) error {
	var req struct {
		Stream             bool   `json:"stream"`
		PreviousResponseID string `json:"previous_response_id"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return err
	}
	if !req.Stream || req.PreviousResponseID != "" {
		return fmt.Errorf("Codex sent stream=%v previous_response_id=%q", req.Stream, req.PreviousResponseID)
	}
	return nil
}

// runCodex drives Codex non-interactively: `codex exec` for the first task,
// `codex exec resume --last` for each next one, through a custom provider
// with wire_api "responses" (HTTPS and SSE; Codex ignores OPENAI_BASE_URL).
func runCodex(ctx context.Context, t *testing.T, bin, baseURL, workdir string) ([]string, error) {
	prompts := make([]string, len(agentTasks))
	for i, task := range agentTasks {
		prompts[i] = task.prompt
	}
	finals, _, err := runCodexPrompts(ctx, t, bin, baseURL, workdir, prompts)
	return finals, err
}

// runCodexPrompts runs one Codex session through prompts, one exec each,
// and returns each task's last message and everything the CLI printed.
func runCodexPrompts(ctx context.Context, t *testing.T, bin, baseURL, workdir string, prompts []string) ([]string, string, error) {
	home := t.TempDir()
	codexHome := filepath.Join(home, "codex")
	if err := os.MkdirAll(codexHome, 0o700); err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(codexConfig(baseURL+"/v1")), 0o600); err != nil {
		return nil, "", err
	}
	env := cliEnv(home, "CODEX_HOME="+codexHome, "TT_AGENTS_TEST_KEY=sk-test-agents-codex")
	last := filepath.Join(home, "last.txt")
	var finals []string
	var printed strings.Builder
	for i, prompt := range prompts {
		args := []string{"exec", "--skip-git-repo-check", "-o", last}
		if i > 0 {
			args = append(args, "resume", "--last")
		}
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "codex"), append(args, prompt)...)
		cmd.Dir, cmd.Env = workdir, env
		out, err := cmd.CombinedOutput()
		printed.Write(out)
		if err != nil {
			return nil, printed.String(), fmt.Errorf("codex task %d: %v\n%s", i+1, err, tail(string(out), 3000))
		}
		b, err := os.ReadFile(last)
		if err != nil {
			return nil, printed.String(), fmt.Errorf("codex task %d wrote no last message: %v\n%s", i+1, err, tail(string(out), 3000))
		}
		finals = append(finals, string(b))
	}
	return finals, printed.String(), nil
}

// codexConfig is the Codex configuration that sends its Responses requests
// over HTTPS (POST /v1/responses, SSE) to baseURL: a custom provider. The
// built-in OpenAI provider uses the Responses WebSocket first
// (codex_ws_test.go). The README shows the same configuration.
func codexConfig(baseURL string) string {
	return fmt.Sprintf(`model = "gpt-5"
model_provider = "tt"
approval_policy = "never"
sandbox_mode = "danger-full-access"
# keep whole files in the history (the default truncates output to ~10 KB)
tool_output_token_limit = 40000

[model_providers.tt]
name = "Token Terminator gateway"
base_url = %q
wire_api = "responses"
env_key = "TT_AGENTS_TEST_KEY"
`, baseURL)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// agentFigures are the totals over a session's candidate requests.
type agentFigures struct {
	requests, accepted, receipts, folds int
	rawBytes, sentBytes                 int
	rawCost, sentCost                   float64
	// billed as the provider's cache would (cost.Simulator: breakpoints,
	// minimum prefix, blocks; the requests 20 s apart)
	billedRaw, billedSent float64
}

func (f agentFigures) String() string {
	return fmt.Sprintf("bytes %d → %d (%.1f%% fewer), %d/%d accepted, receipts %d, folds %d, cache-adjusted cost %.0f → %.0f (%+.1f%%), billed %.0f → %.0f (%+.1f%%)",
		f.rawBytes, f.sentBytes, 100*(1-float64(f.sentBytes)/float64(f.rawBytes)), f.accepted, f.requests,
		f.receipts, f.folds, f.rawCost, f.sentCost, 100*(f.sentCost/f.rawCost-1), f.billedRaw, f.billedSent, 100*(f.billedSent/f.billedRaw-1))
}

// checkAgentSession checks every request of a session: none failed, each
// candidate reached the provider, and what it got passes the checker
// against what the client sent. It returns the session's figures.
func checkAgentSession(t *testing.T, what string, taps []tapped, fwd map[int]forwarded, folding bool) agentFigures {
	t.Helper()
	var f agentFigures
	var prevRaw, prevSent []byte
	var simRaw, simSent *cost.Simulator
	for _, r := range taps {
		if r.Method != "POST" || !isCandidate(r.Path) {
			// count_tokens and the like go through untouched.
			if out, ok := fwd[r.Seq]; ok && !bytes.Equal(out.Body, r.Body) {
				t.Errorf("%s: request %d %s %s: a non-candidate body changed", what, r.Seq, r.Method, r.Path)
			}
			continue
		}
		out, ok := fwd[r.Seq]
		if !ok {
			t.Errorf("%s: request %d %s never reached the provider", what, r.Seq, r.Path)
			continue
		}
		check := compiler.CheckRewriteKeyed
		if folding {
			check = compiler.CheckCompactedKeyed
		}
		if err := check(r.Path, r.Body, out.Body); err != nil {
			t.Errorf("%s: request %d %s: forwarded body fails the checker: %v", what, r.Seq, r.Path, err)
		}
		if err := compiler.CheckRules(r.Path, r.Body); err == nil {
			if err := compiler.CheckRules(r.Path, out.Body); err != nil {
				t.Errorf("%s: request %d %s: forwarded body breaks the provider's rules: %v", what, r.Seq, r.Path, err)
			}
		}
		if out.ContentLength != int64(len(out.Body)) {
			t.Errorf("%s: request %d: Content-Length %d for %d bytes", what, r.Seq, out.ContentLength, len(out.Body))
		}
		for _, k := range []string{"Authorization", "X-Api-Key", "X-Goog-Api-Key"} {
			if out.Header.Get(k) != r.Header.Get(k) {
				t.Errorf("%s: request %d: %s not forwarded as sent", what, r.Seq, k)
			}
		}
		f.requests++
		if !bytes.Equal(r.Body, out.Body) {
			f.accepted++
		}
		f.rawBytes += len(r.Body)
		f.sentBytes += len(out.Body)
		f.receipts += bytes.Count(out.Body, []byte(artifact.ReceiptPrefix)) - bytes.Count(r.Body, []byte(artifact.ReceiptPrefix))
		f.folds += bytes.Count(out.Body, []byte(artifact.FoldPrefix)) - bytes.Count(r.Body, []byte(artifact.FoldPrefix))
		if out.Answer == sideRequest {
			continue // a side request is its own cache line; the session's cost is the main loop's
		}
		raw, sent := renderedPrompt(r.Path, r.Body), renderedPrompt(r.Path, out.Body)
		f.rawCost += compilertest.CacheCost(prevRaw, raw)
		f.sentCost += compilertest.CacheCost(prevSent, sent)
		prevRaw, prevSent = raw, sent
		format, _ := compiler.FormatFor(http.MethodPost, r.Path)
		if simRaw == nil {
			var m struct{ Model string }
			_ = json.Unmarshal(r.Body, &m)
			model := cost.Config{}.Model(format, m.Model)
			simRaw, simSent = &cost.Simulator{Model: model}, &cost.Simulator{Model: model}
		}
		at := time.Unix(0, 0).Add(time.Duration(f.requests) * 20 * time.Second)
		f.billedRaw += simRaw.Step(cost.Render(format, r.Body), at).Cost
		f.billedSent += simSent.Step(cost.Render(format, out.Body), at).Cost
	}
	return f
}

// renderedPrompt is a request's prompt in the order the provider renders
// and caches it (Anthropic: tools, system, then messages; Responses: tools,
// instructions, then input), not in the body's key order: Claude Code puts
// messages first.
func renderedPrompt(path string, body []byte) []byte {
	format, _ := compiler.FormatFor(http.MethodPost, path)
	return cost.Render(format, body).Bytes
}

// preamble is what a client sends before the conversation proper, the
// longest prefix its requests share: tools, system and instructions, and
// the session context before the model's first answer: role "system" and
// "developer" messages (Claude Code's environment, Codex's instructions)
// and the user blocks that are not the person's words (Claude Code's
// <system-reminder> blocks, Codex's <environment_context>). Once the
// person's first message (or a folded turn standing for it) is passed,
// later user messages are the conversation. Empty for a side request.
func preamble(path string, body []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return nil
	}
	out := append(append([]byte{}, m["tools"]...), m["system"]...)
	out = append(out, m["instructions"]...)
	out = append(out, m["systemInstruction"]...) // Gemini
	var items []json.RawMessage
	_ = json.Unmarshal(m["messages"], &items)
	if len(items) == 0 {
		_ = json.Unmarshal(m["input"], &items)
	}
	if len(items) == 0 {
		_ = json.Unmarshal(m["contents"], &items) // Gemini
	}
	person := [][]byte{[]byte(taskTag(1) + " "), []byte(artifact.FoldPrefix)}
	isPerson := func(b []byte) bool { return bytes.Contains(b, person[0]) || bytes.Contains(b, person[1]) }
	passed := false // the person's first message
	for _, it := range items {
		var msg struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
			Parts   json.RawMessage `json:"parts"` // Gemini
		}
		_ = json.Unmarshal(it, &msg)
		if msg.Content == nil {
			msg.Content = msg.Parts
		}
		switch {
		case msg.Role == "system" || msg.Role == "developer":
			out = append(out, it...)
			continue
		case msg.Role != "user":
			return out // the model's first answer: the conversation is under way
		case passed:
			continue
		}
		var blocks []json.RawMessage
		if json.Unmarshal(msg.Content, &blocks) != nil {
			blocks = []json.RawMessage{msg.Content}
		}
		for _, b := range blocks {
			if isPerson(b) {
				passed = true
			} else if !passed {
				out = append(out, b...)
			}
		}
	}
	return out
}

// checkPreamble checks that every scripted request reaches the provider
// with the client's preamble byte for byte: it is the prefix every request
// of the session shares (Claude Code changes it once, after its first
// request, moving a cache_control marker; the gateway must add no change of
// its own).
func checkPreamble(t *testing.T, what string, taps []tapped, fwd map[int]forwarded) {
	t.Helper()
	fail := t.Errorf
	distinct := map[string]bool{}
	for _, r := range taps {
		out, ok := fwd[r.Seq]
		if !ok || out.Answer == sideRequest || !isCandidate(r.Path) {
			continue
		}
		// The recovery tool is the gateway's one deliberate addition (its
		// stickiness is checked in recovery_test.go).
		raw, sent := preamble(r.Path, r.Body), preamble(r.Path, compiler.WithoutRecovery(r.Body, out.Body))
		if len(raw) == 0 {
			t.Errorf("%s: request %d: no preamble found", what, r.Seq)
			continue
		}
		distinct[string(raw)] = true
		if !bytes.Equal(raw, sent) {
			fail("%s: request %d (%s): the preamble changed on the way (%d → %d bytes, common prefix %d)", what, r.Seq, out.Answer, len(raw), len(sent), fixtures.CommonPrefix(raw, sent))
		}
	}
	t.Logf("%s: the client sent %d distinct preambles", what, len(distinct))
}

// checkBenefits checks what the gateway gains for the client: accepted rewrites
// with the client's defaults (for Claude Code, thinking on), and the re-read
// file present once in the request that carries the re-read.
func checkBenefits(t *testing.T, c agentClient, taps []tapped, fwd map[int]forwarded) {
	t.Helper()
	client := c.name
	fail := t.Errorf
	accepted := 0
	for _, r := range taps {
		if strings.HasPrefix(r.TT, "accepted") {
			accepted++
		}
	}
	t.Logf("%s: %d requests accepted by the gateway", client, accepted)
	if accepted == 0 {
		fail("%s: no request was rewritten with the client's default configuration", client)
	}
	reRead := fmt.Sprintf("t%ds1", reReadTask) // the reply to the re-read's result
	marker := fileMarker(reReadFile)
	for _, r := range taps {
		out, ok := fwd[r.Seq]
		if !ok || out.Answer != reRead {
			continue
		}
		raw, sent := bytes.Count(r.Body, marker), bytes.Count(out.Body, marker)
		t.Logf("%s: the request carrying the re-read of %s holds %d copies, %d forwarded", client, reReadFile, raw, sent)
		if raw < 2 {
			t.Errorf("%s: the re-read request holds %d copies of %s, want the read and the re-read", client, raw, reReadFile)
		}
		if sent != 1 {
			fail("%s: the re-read %s reached the provider %d times, want once (the older copy a receipt)", client, reReadFile, sent)
		}
		return
	}
	t.Errorf("%s: no request carried the re-read of %s", client, reReadFile)
}

// agentTenantKey is the agent sessions' tenant key: the live gateway and
// the replays share it, as the gateways of a fleet do.
const agentTenantKey = "agents-tenant-key-0123456789abcdef"

// agentSnippet is defaultSnippet with agentTenantKey; agentOffSnippet the
// same with compaction off.
const (
	agentSnippet = `
	token_terminator {
		vault_dir $VAULT
		tenant_key ` + agentTenantKey + `
	}
	reverse_proxy $UPSTREAM
`
	agentOffSnippet = `
	token_terminator {
		vault_dir $VAULT
		tenant_key ` + agentTenantKey + `
		context_compaction off
	}
	reverse_proxy $UPSTREAM
`
)
