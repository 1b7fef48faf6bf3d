package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// geminiCLIKey is the API key the Gemini CLI sends (x-goog-api-key).
const geminiCLIKey = "AIza-test-agents-gemini"

// geminiCLIModel is the model the session names (-m): without one the CLI
// first asks a model router.
const geminiCLIModel = "gemini-2.5-pro"

var geminiCLI = agentClient{
	name:    "GeminiCLI",
	dialect: func(w string) agentDialect { return geminiDialect{workdir: w} },
	run:     runGeminiCLI,
	premise: geminiPremise,
	verify:  [2]string{"/v1beta/models/" + geminiCLIModel + ":streamGenerateContent", "X-Goog-Api-Key: " + geminiCLIKey},
	// One process per task, each starting in several seconds.
	timeout: 6 * time.Minute,
	check:   checkGeminiSignatures,
}

var geminiSigRE = regexp.MustCompile(`"thoughtSignature":"[^"]*"`)

// checkGeminiSignatures: every thought signature of the current turn (the
// model's steps after the person's last message) reaches the provider
// byte for byte, and every signature forwarded is one the client sent.
func checkGeminiSignatures(t *testing.T, taps []tapped, fwd map[int]forwarded) {
	t.Helper()
	current := 0
	for _, r := range taps {
		out, ok := fwd[r.Seq]
		if !ok || out.Answer == sideRequest || !isCandidate(r.Path) {
			continue
		}
		last := bytes.LastIndex(r.Body, []byte("TT-TASK-"))
		if last < 0 {
			continue
		}
		for _, sig := range geminiSigRE.FindAll(r.Body[last:], -1) {
			current++
			if bytes.Count(out.Body, sig) != bytes.Count(r.Body, sig) {
				t.Errorf("request %d: the current turn's %s did not reach the provider as sent", r.Seq, sig)
			}
		}
		for _, sig := range geminiSigRE.FindAll(out.Body, -1) {
			if !bytes.Contains(r.Body, sig) {
				t.Errorf("request %d: %s forwarded, not sent by the client", r.Seq, sig)
			}
		}
	}
	if current == 0 {
		t.Error("no request carried a signature of its current turn")
	}
	t.Logf("GeminiCLI: %d signatures of current turns forwarded byte for byte", current)
}

// TestGeminiCLI drives the real Gemini CLI (npm @google/gemini-cli) over
// the ten-turn session of TestAgentCLIs (reads, a re-read, parallel reads,
// an edit, shell commands), once straight to the scripted fake Gemini and
// once through Caddy with the module, with the same checks: the client
// finishes exactly as it does directly, every forwarded body passes the
// checker, rewrites are accepted, the model's thought signatures come back
// byte-identical, and a replay through a fresh gateway forwards the same
// bytes. The scripted provider reports a simulated implicit cache in
// usageMetadata.
//
// Skipped with -short or when npm or the CLI cannot run.
func TestGeminiCLI(t *testing.T) {
	needNode(t, "agent CLI test")
	bin := filepath.Join(npmInstall(t, "token-terminator-gemini-test", geminiPackages...), ".bin")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "gemini"), "--version")
	cmd.Env = cliEnv(t.TempDir())
	out, err := cmd.CombinedOutput()
	cancel()
	if err != nil {
		t.Skipf("the gemini CLI installed by npm cannot run here: %v\n%s", err, out)
	}
	t.Logf("gemini %s", bytes.TrimSpace(out))
	ctx, cancel = context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	testAgentClient(ctx, t, geminiCLI, bin)
}

// runGeminiCLI drives the Gemini CLI non-interactively: `gemini -p` for the
// first task, with `--resume latest` for each next one, YOLO (no
// confirmations), JSON output; API-key auth pointed at baseURL.
func runGeminiCLI(ctx context.Context, t *testing.T, bin, baseURL, workdir string) ([]string, error) {
	home := t.TempDir()
	settings := `{"security":{"auth":{"selectedType":"gemini-api-key"},"folderTrust":{"enabled":false}},` +
		`"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false},` +
		`"general":{"disableAutoUpdate":true,"disableUpdateNag":true}}`
	if err := os.MkdirAll(filepath.Join(home, ".gemini"), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(home, ".gemini", "settings.json"), []byte(settings), 0o600); err != nil {
		return nil, err
	}
	env := cliEnv(home, "GEMINI_API_KEY="+geminiCLIKey, "GOOGLE_GEMINI_BASE_URL="+baseURL, "GEMINI_CLI_NO_RELAUNCH=true", "NO_COLOR=1", "CI=1")
	var finals []string
	for i, task := range agentTasks {
		args := []string{"-p", task.prompt, "-m", geminiCLIModel, "--yolo", "-o", "json"}
		if i > 0 {
			args = append(args, "--resume", "latest")
		}
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "gemini"), args...)
		cmd.Dir, cmd.Env = workdir, env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("gemini task %d: %v\n%s\n%s", i+1, err, tail(string(out), 2000), tail(stderr.String(), 3000))
		}
		var res struct {
			Response string `json:"response"`
		}
		if i := bytes.IndexByte(out, '{'); i >= 0 {
			out = out[i:]
		}
		if err := json.Unmarshal(out, &res); err != nil {
			return nil, fmt.Errorf("gemini task %d: output is not JSON: %v\n%s", i+1, err, tail(string(out), 2000))
		}
		finals = append(finals, res.Response)
	}
	return finals, nil
}

// geminiPremise: the whole contents go in every scripted request, and the
// model's signed calls come back with their signatures.
func geminiPremise(body []byte) error {
	var req struct {
		Contents []json.RawMessage `json:"contents"`
		Tools    []struct {
			FunctionDeclarations []json.RawMessage `json:"functionDeclarations"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil || len(req.Contents) == 0 {
		return fmt.Errorf("not a Gemini request with contents (%v)", err)
	}
	if len(req.Tools) == 0 || len(req.Tools[0].FunctionDeclarations) == 0 {
		return fmt.Errorf("no functionDeclarations")
	}
	return nil
}

// --- Gemini CLI: generateContent, SSE ---

// geminiDialect speaks the Gemini API with the Gemini CLI's tools
// (read_file, replace and run_shell_command; paths absolute, so it knows
// the work directory). Every model step carries a thought and a signature
// on its first part, as thinking models return them.
type geminiDialect struct{ workdir string }

type geminiContent struct {
	Role  string `json:"role"`
	Parts []struct {
		Text             string `json:"text"`
		FunctionResponse *struct {
			ID   string `json:"id"`
			Name string `json:"name"`
		} `json:"functionResponse"`
	} `json:"parts"`
}

func (geminiDialect) next(body []byte) (int, int, bool) {
	var req struct {
		Contents []geminiContent   `json:"contents"`
		Tools    []json.RawMessage `json:"tools"`
	}
	if json.Unmarshal(body, &req) != nil || len(req.Contents) == 0 || len(req.Tools) == 0 {
		return 0, 0, false
	}
	last := req.Contents[len(req.Contents)-1]
	if last.Role != "user" && last.Role != "" {
		return 0, 0, false
	}
	var text strings.Builder
	for _, p := range last.Parts {
		if fr := p.FunctionResponse; fr != nil {
			if m := callIDRE.FindStringSubmatch(fr.ID); m != nil {
				task, _ := strconv.Atoi(m[1])
				step, _ := strconv.Atoi(m[2])
				return task, step + 1, true
			}
		}
		text.WriteString(p.Text)
	}
	return taskOf(text.String())
}

// geminiSignature is the signature of a scripted step.
func geminiSignature(task, step int) string {
	return fmt.Sprintf("c2lnLWdlbWluaQ-t%ds%d==", task, step)
}

func (d geminiDialect) reply(w http.ResponseWriter, body []byte, task, step int, calls []agentAction, final string, u cacheUsage) {
	usage := fmt.Sprintf(`{"promptTokenCount":%d,"cachedContentTokenCount":%d,"candidatesTokenCount":20,"thoughtsTokenCount":8,"totalTokenCount":%d}`, u.input(), u.read, u.input()+28)
	sig := geminiSignature(task, step)
	chunks := []string{fmt.Sprintf(`{"text":"Planning step %d of task %d.","thought":true}`, step, task)}
	if len(calls) == 0 {
		chunks = append(chunks, fmt.Sprintf(`{"text":%s,"thoughtSignature":%q}`, jsonString(final), sig))
	}
	for i, c := range calls {
		name, args := d.tool(c)
		s := ""
		if i == 0 { // parallel calls: the signature is on the first only
			s = fmt.Sprintf(`,"thoughtSignature":%q`, sig)
		}
		chunks = append(chunks, fmt.Sprintf(`{"functionCall":{"id":"t%ds%dc%d","name":%q,"args":%s}%s}`, task, step, i, name, args, s))
	}
	geminiWrite(w, chunks, usage)
}

// geminiWrite answers with the parts as the API does: SSE, one part per
// chunk, the last with the finishReason; every chunk carries usage.
func geminiWrite(w http.ResponseWriter, parts []string, usage string) {
	var ev [][2]string
	for i, p := range parts {
		fin := ""
		if i == len(parts)-1 {
			fin = `,"finishReason":"STOP"`
		}
		ev = append(ev, [2]string{"", fmt.Sprintf(`{"candidates":[{"content":{"role":"model","parts":[%s]}%s,"index":0}],"usageMetadata":%s,"modelVersion":%q,"responseId":"fake"}`, p, fin, usage, geminiCLIModel)})
	}
	sse(w, ev...)
}

// tool renders an action as the Gemini CLI's tool and its JSON args.
func (d geminiDialect) tool(a agentAction) (string, string) {
	m := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	switch a.kind {
	case actRead:
		return "read_file", m(map[string]string{"file_path": d.workdir + "/" + a.file})
	case actEdit:
		return "replace", m(map[string]any{"file_path": d.workdir + "/" + a.file, "old_string": a.old, "new_string": a.new, "instruction": "Edit the line."})
	default:
		return "run_shell_command", m(map[string]string{"command": a.cmd, "description": "Run a command"})
	}
}

// sideReply answers the CLI's requests outside the script: its checks (a
// JSON verdict such as next_speaker), countTokens.
func (geminiDialect) sideReply(w http.ResponseWriter, r *http.Request, body []byte) {
	usage := `{"promptTokenCount":100,"candidatesTokenCount":10,"totalTokenCount":110}`
	switch {
	case strings.HasSuffix(r.URL.Path, ":countTokens"):
		jsonReply(w, `{"totalTokens":1000}`)
	case strings.HasSuffix(r.URL.Path, ":streamGenerateContent"):
		geminiWrite(w, []string{`{"text":"{\"reasoning\":\"The task is done.\",\"next_speaker\":\"user\"}"}`}, usage)
	case strings.HasSuffix(r.URL.Path, ":generateContent"):
		jsonReply(w, `{"candidates":[{"content":{"role":"model","parts":[{"text":"{\"reasoning\":\"The task is done.\",\"next_speaker\":\"user\"}"}]},"finishReason":"STOP","index":0}],"usageMetadata":`+usage+`}`)
	default:
		http.NotFound(w, r)
	}
}
