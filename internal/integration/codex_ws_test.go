package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
)

// runCodexBuiltin runs the scripted tasks with Codex's default
// configuration: the built-in OpenAI provider (Responses WebSocket first),
// its base URL pointed at baseURL. It returns each task's last message and
// what Codex saw: everything it printed and the session logs it wrote.
func runCodexBuiltin(ctx context.Context, t *testing.T, bin, baseURL, workdir string) (finals []string, seen string, err error) {
	home := t.TempDir()
	codexHome := filepath.Join(home, "codex")
	os.MkdirAll(codexHome, 0o700)
	cfg := fmt.Sprintf("model = \"gpt-5\"\nopenai_base_url = %q\napproval_policy = \"never\"\nsandbox_mode = \"danger-full-access\"\ntool_output_token_limit = 40000\n", baseURL+"/v1")
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(cfg), 0o600); err != nil {
		return nil, "", err
	}
	env := cliEnv(home, "CODEX_HOME="+codexHome)
	// The built-in provider authenticates with the key Codex was logged in
	// with (OPENAI_API_KEY alone is not sent on the socket).
	login := exec.CommandContext(ctx, filepath.Join(bin, "codex"), "login", "--with-api-key")
	login.Env, login.Stdin = env, strings.NewReader("sk-test-agents-codex-ws\n")
	if out, err := login.CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("codex login: %v\n%s", err, out)
	}
	last := filepath.Join(home, "last.txt")
	var printed strings.Builder
	for i, task := range agentTasks {
		args := []string{"exec", "--skip-git-repo-check", "-o", last}
		if i > 0 {
			args = append(args, "resume", "--last")
		}
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "codex"), append(args, task.prompt)...)
		cmd.Dir, cmd.Env = workdir, env
		out, err := cmd.CombinedOutput()
		printed.Write(out)
		if err != nil {
			return nil, "", fmt.Errorf("codex task %d: %v\n%s", i+1, err, tail(string(out), 3000))
		}
		b, err := os.ReadFile(last)
		if err != nil {
			return nil, "", err
		}
		finals = append(finals, string(b))
	}
	_ = filepath.WalkDir(filepath.Join(codexHome, "sessions"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, err := os.ReadFile(path); err == nil {
				printed.Write(b)
			}
		}
		return nil
	})
	return finals, printed.String(), nil
}

// codexWSRun is one Codex session over the Responses WebSocket, directly
// or through Caddy, and what each side saw.
type codexWSRun struct {
	finals []string
	seen   string // what Codex printed and logged
	prov   *agentProvider
	ws     *wsAgentProvider
	g      *gateway // nil: directly to the provider
	tap    *wsTap   // nil: directly to the provider
}

// runCodexWS runs the scripted session with Codex's default configuration
// against the scripted provider, through Caddy with snippet when it is not
// empty (a tap in front of Caddy keeps what Codex sent and received);
// recovering, when set, is the model that calls the gateway's tool.
func runCodexWS(ctx context.Context, t *testing.T, bin, snippet string, recovering *wsRecovering) (codexWSRun, error) {
	dir := t.TempDir()
	writeAgentFiles(t, dir)
	r := codexWSRun{prov: newAgentProvider(t, agentTasks, ownToolHidden{codexDialect{}})}
	r.ws = newWSAgentProvider(t, r.prov, recovering)
	base := r.ws.URL
	if snippet != "" {
		r.g = startGateway(t, snippet, &upstream{Server: r.ws.Server})
		r.tap = newWSTap(t, r.g.URL)
		base = r.tap.URL
	}
	var err error
	r.finals, r.seen, err = runCodexBuiltin(ctx, t, bin, base, dir)
	return r, err
}

// wireBytes is the bytes of the text messages the provider received over
// its sockets, and of the response.create messages among them.
func (r codexWSRun) wireBytes() (all, creates int) {
	for _, m := range r.ws.messages() {
		all += len(m.Body)
		if m.Create {
			creates += len(m.Body)
		}
	}
	return all, creates
}

// codexWSBin installs the pinned Codex CLI (cached as for TestAgentCLIs)
// and returns its bin directory.
func codexWSBin(t *testing.T) string {
	needNode(t, "agent CLI test")
	return filepath.Join(npmInstall(t, "token-terminator-agents-test", claudeCodePackage, codexPackage), ".bin")
}

// The real Codex CLI with its default configuration (built-in provider,
// Responses WebSocket) runs the scripted tasks directly and through Caddy:
// it finishes the same way, the provider's script is the same, every
// whole history the model was given obeys the Responses rules, each
// client message is logged, no previous_response_id fails to resolve on
// its socket, and the bytes at the provider fall by at least 30%. With the
// default recovery tool the model calls the gateway's tool over the
// socket, and Codex never sees it.
func TestCodexWebSocketDefault(t *testing.T) {
	bin := codexWSBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Second)
	defer cancel()
	direct, err := runCodexWS(ctx, t, bin, "", nil)
	if err != nil {
		t.Skipf("Codex does not finish directly over the WebSocket here: %v", err)
	}
	if _, n := direct.wireBytes(); n == 0 {
		t.Skip("Codex sent nothing over the WebSocket (it fell back to HTTPS)")
	}
	if _, refused := direct.ws.counts(); refused != 0 {
		t.Fatalf("directly, %d messages continued a response their socket does not hold", refused)
	}
	for _, c := range []struct {
		name, snippet string
		recovering    *wsRecovering
	}{
		{"RecoveryAPI", wsSnippet, nil},
		{"RecoveryTool", defaultSnippet, &wsRecovering{max: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := runCodexWS(ctx, t, bin, c.snippet, c.recovering)
			if err != nil {
				t.Fatalf("through the gateway: %v", err)
			}
			checkCodexWS(t, direct, got)
			checkCodexWSTools(t, got)
			if c.recovering != nil {
				checkCodexWSRecovery(t, got, c.recovering)
			}
			checkCodexWSBytes(t, direct, got)
		})
	}
}

// checkCodexWS checks a session through the gateway against the direct one.
func checkCodexWS(t *testing.T, direct, got codexWSRun) {
	t.Helper()
	if strings.Join(got.finals, "\x00") != strings.Join(direct.finals, "\x00") {
		t.Fatalf("Codex finished differently through the gateway:\n%q\ndirectly:\n%q", got.finals, direct.finals)
	}
	if a, b := strings.Join(got.prov.script(), ","), strings.Join(direct.prov.script(), ","); a != b {
		t.Fatalf("script through the gateway %s, directly %s", a, b)
	}
	if _, refused := got.ws.counts(); refused != 0 {
		t.Fatalf("%d messages through the gateway continued a response their socket does not hold", refused)
	}
	// Every message through the gateway, rewritten or not, continues a
	// history the provider holds: the Responses rules hold on each whole
	// history the model was given.
	wholes := got.ws.wholeBodies()
	if len(wholes) == 0 {
		t.Fatal("no message reached the provider")
	}
	for i, b := range wholes {
		if err := compiler.CheckRules("/v1/responses", b); err != nil {
			t.Fatalf("whole history %d breaks the Responses rules: %v", i, err)
		}
	}
	if !bytes.Contains(got.tap.clientRead(), []byte(`"type":"response.completed"`)) || len(got.tap.clientGot()) == 0 {
		t.Fatal("the tap saw no response reach Codex")
	}
	creates := 0
	for _, m := range got.tap.clientSent() {
		if bytes.HasPrefix(m, []byte(`{"type":"response.create"`)) {
			creates++
		}
	}
	logged := 0
	for _, l := range got.g.logLines() {
		if strings.Contains(l, `"msg":"websocket message"`) {
			logged++
		}
	}
	if creates == 0 || logged < creates {
		t.Fatalf("%d websocket message log lines for the %d response.create messages Codex sent", logged, creates)
	}
}

// checkCodexWSRecovery checks the recovery over the socket: the model
// called the gateway's tool, each call was answered on the same socket by
// a follow-up carrying a part of what Codex sent, and Codex never saw the
// tool: not on its socket, not in what it printed or logged, not in what
// it sent.
func checkCodexWSRecovery(t *testing.T, got codexWSRun, m *wsRecovering) {
	t.Helper()
	read := m.recovered()
	var followUps [][]byte
	for _, b := range got.ws.wholeBodies() {
		if endsWithOwnOutput(b) {
			followUps = append(followUps, b)
		}
	}
	t.Logf("the model called the gateway's tool for %d receipts; %d follow-ups reached the provider", len(read), len(followUps))
	if len(read) == 0 {
		t.Errorf("the model never called the gateway's tool over the socket (no receipt offered with the tool reached it)")
	}
	if len(followUps) < len(read) {
		t.Errorf("%d follow-ups for %d calls of the gateway's tool", len(followUps), len(read))
	}
	var sent []tapped
	for _, b := range got.tap.clientSent() {
		sent = append(sent, tapped{Body: b})
	}
	for _, b := range followUps {
		outs := ownToolOutputs(b)
		var page struct {
			ArtifactID string  `json:"artifact_id"`
			Content    string  `json:"content"`
			Error      *string `json:"error"`
		}
		if err := json.Unmarshal([]byte(outs[len(outs)-1]), &page); err != nil || page.Error != nil || page.Content == "" {
			t.Errorf("tool result %.300s: %v", outs[len(outs)-1], err)
			continue
		}
		if !containsString(read, page.ArtifactID) || !sentByClient(sent, page.Content) {
			t.Errorf("the follow-up for %s carried content Codex never sent: %.200q", page.ArtifactID, page.Content)
		}
	}
	if bytes.Contains(got.tap.clientRead(), []byte(recovery.ToolName)) {
		t.Errorf("Codex received the gateway's tool on its socket")
	}
	for i, b := range got.tap.clientSent() {
		if bytes.Contains(b, []byte(recovery.ToolName)) {
			t.Errorf("Codex's message %d names the gateway's tool", i)
		}
	}
	if strings.Contains(got.seen, recovery.ToolName) {
		t.Errorf("Codex printed or logged the gateway's tool:\n%s", tail(got.seen, 2000))
	}
}

// checkCodexWSBytes logs and checks the bytes at the provider against
// the direct session.
func checkCodexWSBytes(t *testing.T, direct, got codexWSRun) {
	t.Helper()
	dAll, dCreates := direct.wireBytes()
	gAll, gCreates := got.wireBytes()
	chained := 0
	for _, m := range got.ws.messages() {
		if m.Create && bytes.Contains(m.Body, []byte(`"previous_response_id":"resp_`)) {
			chained++
		}
	}
	drop := 1 - float64(gAll)/float64(dAll)
	sockets, _ := got.ws.counts()
	t.Logf("Codex default (WebSocket): %d messages on %d sockets (%d continuing previous_response_id); provider bytes direct %d (creates %d), through the gateway %d (creates %d): %.1f%% fewer",
		len(got.ws.messages()), sockets, chained, dAll, dCreates, gAll, gCreates, 100*drop)
	if drop < 0.30 {
		t.Errorf("bytes at the provider fell by %.1f%%, want at least 30%%", 100*drop)
	}
}
