package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery/recoverytest"
)

// recoveringModel wraps a client's scripted dialect with a model that
// recovers: a scripted request that carries a receipt is answered by
// recoverytest.Model, which calls token_terminator for the receipt's
// artifact page by page and then answers with the text it recovered. The
// gateway's follow-ups (the request plus our tool's results) belong to the
// task the person last asked for.
type recoveringModel struct {
	agentDialect
	format provider.Format
	pages  int // the artifact's pages of max_page_chars the model reads
}

func (d *recoveringModel) next(body []byte) (int, int, bool) {
	if len(recoverytest.OwnResults(d.format, body)) == 0 {
		return d.agentDialect.next(body)
	}
	ms := taskTagRE.FindAllSubmatch(body, -1)
	if len(ms) == 0 {
		return 0, 0, false
	}
	n, _ := strconv.Atoi(string(ms[len(ms)-1][1]))
	return n, 0, true
}

func (d *recoveringModel) reply(w http.ResponseWriter, body []byte, task, step int, calls []agentAction, final string, u cacheUsage) {
	m := receiptIDRE.FindSubmatch(body)
	if m == nil {
		d.agentDialect.reply(w, body, task, step, calls, final, u)
		return
	}
	model := recoverytest.Model{Format: d.format, ID: string(m[1]), Rounds: d.pages, PageChars: recovery.DefaultMaxPageChars}
	turn, err := model.Answer(body)
	if err != nil {
		http.Error(w, strconv.Quote(err.Error()), http.StatusBadRequest) // the CLI fails, and so does the test
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Write(turn.Stream(d.format, len(recoverytest.OwnResults(d.format, body))))
}

// recoveringCLI is one real CLI the recovery session runs.
type recoveringCLI struct {
	name       string
	format     provider.Format
	credential string
	dialect    func(workdir string) agentDialect
	run        func(ctx context.Context, t *testing.T, bin, baseURL, workdir string, prompts []string) ([]string, string, error)
}

var recoveringCLIs = []recoveringCLI{
	{"ClaudeCode", provider.Anthropic, "X-Api-Key: sk-ant-test-agents",
		func(w string) agentDialect { return claudeDialect{workdir: w} }, runClaude},
	{"Codex", provider.Responses, "Authorization: Bearer sk-test-agents-codex",
		func(string) agentDialect { return codexDialect{} }, runCodexPrompts},
}

// recoveryCLITasks: the first task reads a.txt (its result goes upstream
// inline, unanswered); the second needs it again, and by then the gateway
// sends it as a receipt, so the model recovers it.
var recoveryCLITasks = []agentTask{
	{taskTag(1) + " Read a.txt.", [][]agentAction{{{kind: actRead, file: "a.txt"}}}},
	{taskTag(2) + " Quote line 170 of a.txt.", nil},
}

// TestCLIRecoveringSession drives the real Claude Code and Codex CLIs
// through the gateway (defaults: recovery tool on) to a fake provider whose
// model recovers the receipt it is sent. The CLI must complete with the
// model's final text; the gateway's follow-ups must carry the exact vaulted
// content of the receipt (the artifact API's, a part of what the CLI sent);
// the CLI must never see the tool: not in what it printed, not in what it
// sent.
//
// Skipped with -short or when npm or a CLI cannot run (installed and cached
// as for TestAgentCLIs).
func TestCLIRecoveringSession(t *testing.T) {
	needNode(t, "agent CLI test")
	bin := filepath.Join(npmInstall(t, "token-terminator-agents-test", claudeCodePackage, codexPackage), ".bin")
	for _, c := range recoveringCLIs {
		t.Run(c.name, func(t *testing.T) { testCLIRecovering(t, c, bin) })
	}
}

func testCLIRecovering(t *testing.T, c recoveringCLI, bin string) {
	exe := map[string]string{"ClaudeCode": "claude", "Codex": "codex"}[c.name]
	vctx, vcancel := context.WithTimeout(context.Background(), 30*time.Second)
	version := exec.CommandContext(vctx, filepath.Join(bin, exe), "--version")
	version.Env = cliEnv(t.TempDir())
	out, err := version.CombinedOutput()
	vcancel()
	if err != nil {
		t.Skipf("the %s CLI installed by npm cannot run here: %v\n%s", exe, err, out)
	}

	dir := t.TempDir()
	writeAgentFiles(t, dir)
	d := &recoveringModel{agentDialect: c.dialect(dir), format: c.format, pages: 2}
	prov := newAgentProvider(t, recoveryCLITasks, d)
	g := startGateway(t, defaultSnippet, prov.upstream)
	path := "/v1/responses"
	if c.format == provider.Anthropic {
		path = "/v1/messages"
	}
	g.verify(path, c.credential) // the provider accepted this key before
	tp := newTap(t, g.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	prompts := []string{recoveryCLITasks[0].prompt, recoveryCLITasks[1].prompt}
	finals, printed, err := c.run(ctx, t, bin, tp.URL, dir, prompts)
	if err != nil {
		t.Fatal(err)
	}

	// The gateway's follow-ups: the last one holds every page recovered.
	var followUps [][]byte
	for _, r := range prov.all() {
		if len(recoverytest.OwnResults(c.format, r.Body)) > 0 {
			followUps = append(followUps, r.Body)
		}
	}
	if len(followUps) != d.pages {
		t.Fatalf("%d follow-up requests, want %d (one per page)", len(followUps), d.pages)
	}
	var recovered strings.Builder
	id := ""
	for _, res := range recoverytest.OwnResults(c.format, followUps[len(followUps)-1]) {
		var page struct {
			ArtifactID string  `json:"artifact_id"`
			Content    string  `json:"content"`
			Error      *string `json:"error"`
		}
		if err := json.Unmarshal([]byte(res), &page); err != nil || page.Error != nil {
			t.Fatalf("tool result %.200s: %v", res, err)
		}
		id = page.ArtifactID
		recovered.WriteString(page.Content)
	}

	// Exact: the artifact API (the client's credential) returns the same
	// content, which is a part of the Read result the CLI sent.
	var whole struct {
		Content    string
		TotalChars int
	}
	for offset := 0; ; {
		api := g.do(http.MethodGet, fmt.Sprintf("%sartifacts/%s?offset=%d", recovery.DefaultPath, id, offset), nil, 0, c.credential)
		var page struct {
			Content    string `json:"content"`
			NextOffset *int   `json:"next_offset"`
			TotalChars int    `json:"total_chars"`
		}
		if api.Status != http.StatusOK || json.Unmarshal(api.Body, &page) != nil {
			t.Fatalf("artifact API: %d %.300s", api.Status, api.Body)
		}
		whole.Content += page.Content
		whole.TotalChars = page.TotalChars
		if page.NextOffset == nil {
			break
		}
		offset = *page.NextOffset
	}
	if recovered.String() != whole.Content {
		t.Fatalf("the follow-up carried %d characters, the vault holds %d (%d)", len([]rune(recovered.String())), len([]rune(whole.Content)), whole.TotalChars)
	}
	if !strings.Contains(whole.Content, string(fileMarker("a.txt"))) || !sentByClient(tp.all(), whole.Content) {
		t.Fatalf("the recovered content is not the read of a.txt the CLI sent: %.200s", whole.Content)
	}

	// The CLI completed with the model's final text.
	if len(finals) != 2 || !strings.Contains(finals[1], "recovered: ") || !strings.Contains(finals[1], string(fileMarker("a.txt"))) {
		t.Fatalf("finals: %.300q", finals)
	}
	// The CLI never saw the tool: not in what it printed, not in what it
	// sent (it would have answered a call it saw).
	if strings.Contains(printed, recovery.ToolName) {
		t.Fatalf("the CLI printed the gateway's tool:\n%s", tail(printed, 2000))
	}
	for _, r := range tp.all() {
		if bytes.Contains(r.Body, []byte(recovery.ToolName)) {
			t.Fatalf("request %d from the CLI names the gateway's tool", r.Seq)
		}
		if r.Status != http.StatusOK {
			t.Fatalf("request %d %s failed: %d", r.Seq, r.Path, r.Status)
		}
	}
	logged := false
	for _, l := range g.logLines() {
		logged = logged || strings.Contains(l, fmt.Sprintf(`"recovery_rounds":%d`, d.pages))
	}
	if !logged {
		t.Fatalf("no log line with recovery_rounds=%d", d.pages)
	}
	t.Logf("%s: the model recovered %s (%d characters) in %d rounds", c.name, id, whole.TotalChars, len(followUps))
}

// sentByClient reports whether content, JSON-encoded as the clients
// encode strings (no HTML escaping), is in a body the client sent.
func sentByClient(reqs []tapped, content string) bool {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(content) != nil {
		return false
	}
	lit := bytes.TrimSuffix(bytes.TrimSpace(buf.Bytes()), []byte(`"`))[1:]
	for _, r := range reqs {
		if bytes.Contains(r.Body, lit) {
			return true
		}
	}
	return false
}
