package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/fakeprovider"
	"github.com/tokenterminator/caddy-token-terminator/internal/wsrelay"
)

// wsAgentProvider serves the scripted agent provider's Responses answers
// over the Responses WebSocket as well: each response.create message is
// answered by the events the HTTPS stream carries, one message each, from
// the same script (the request recorded is the message). A warm-up message
// (generate: false) is answered with an empty completed response.
//
// It keeps each response's whole history (the history of the response its
// request continued, the request's input, the response's output), as the
// provider does for previous_response_id, and records the history every
// scripted message stands for (histories), so the Responses rules can be
// checked on what the model was given.
func wsAgentProvider(t *testing.T, p *agentProvider) (*httptest.Server, func() [][]byte) {
	inner := p.Server.Config.Handler
	var mu sync.Mutex
	hist := map[string][]json.RawMessage{}
	var histories [][]byte
	whole := func(msg []byte) []json.RawMessage {
		var req struct {
			Prev  string            `json:"previous_response_id"`
			Input []json.RawMessage `json:"input"`
		}
		_ = json.Unmarshal(msg, &req)
		mu.Lock()
		defer mu.Unlock()
		return append(append([]json.RawMessage(nil), hist[req.Prev]...), req.Input...)
	}
	keep := func(id string, items []json.RawMessage) {
		mu.Lock()
		hist[id] = items
		mu.Unlock()
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			inner.ServeHTTP(w, r)
			return
		}
		conn, brw, ok := fakeprovider.Upgrade(w, r.Header.Get("Sec-WebSocket-Key"))
		if !ok {
			return
		}
		defer conn.Close()
		send := func(op byte, p []byte) error {
			_, err := conn.Write(wsrelay.AppendFrame(nil, true, op, false, [4]byte{}, p))
			return err
		}
		var msg []byte
		for {
			h, payload, err := fakeprovider.ReadFrame(brw.Reader)
			if err != nil {
				return
			}
			switch h.Op {
			case wsrelay.OpPing:
				send(wsrelay.OpPong, payload)
				continue
			case wsrelay.OpClose:
				send(wsrelay.OpClose, payload)
				return
			case wsrelay.OpPong:
				continue
			case wsrelay.OpText, wsrelay.OpBinary:
				msg = append(msg[:0], payload...)
			default:
				msg = append(msg, payload...)
			}
			if !h.Fin {
				continue
			}
			var head struct {
				Type     string `json:"type"`
				Model    string `json:"model"`
				Generate *bool  `json:"generate"`
			}
			if json.Unmarshal(msg, &head) != nil || head.Type != "response.create" {
				continue
			}
			items := whole(msg)
			if head.Generate != nil && !*head.Generate {
				keep("resp_warm", items)
				resp := fmt.Sprintf(`{"id":"resp_warm","object":"response","created_at":1,"status":"%%s","model":%q,"output":[],"usage":{"input_tokens":0,"output_tokens":0,"total_tokens":0,"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}}`, head.Model)
				send(wsrelay.OpText, []byte(`{"type":"response.created","sequence_number":0,"response":`+fmt.Sprintf(resp, "in_progress")+`}`))
				send(wsrelay.OpText, []byte(`{"type":"response.completed","sequence_number":1,"response":`+fmt.Sprintf(resp, "completed")+`}`))
				continue
			}
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, r.URL.Path, bytes.NewReader(msg))
			req.Header = r.Header.Clone()
			req.Header.Del("Upgrade")
			inner.ServeHTTP(rec, req)
			b, _ := json.Marshal(map[string]any{"model": head.Model, "input": items})
			mu.Lock()
			histories = append(histories, b)
			mu.Unlock()
			for _, line := range strings.Split(rec.Body.String(), "\n") {
				if data, ok := strings.CutPrefix(line, "data: "); ok && data != "[DONE]" {
					var ev struct {
						Type     string `json:"type"`
						Response struct {
							ID     string            `json:"id"`
							Output []json.RawMessage `json:"output"`
						} `json:"response"`
					}
					if json.Unmarshal([]byte(data), &ev) == nil && ev.Type == "response.completed" {
						keep(ev.Response.ID, append(append([]json.RawMessage(nil), items...), ev.Response.Output...))
					}
					if send(wsrelay.OpText, []byte(data)) != nil {
						return
					}
				}
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv, func() [][]byte {
		mu.Lock()
		defer mu.Unlock()
		return append([][]byte(nil), histories...)
	}
}

// runCodexBuiltin runs the scripted tasks with Codex's default
// configuration: the built-in OpenAI provider (Responses WebSocket first),
// its base URL pointed at baseURL.
func runCodexBuiltin(ctx context.Context, t *testing.T, bin, baseURL, workdir string) ([]string, error) {
	home := t.TempDir()
	codexHome := filepath.Join(home, "codex")
	os.MkdirAll(codexHome, 0o700)
	cfg := fmt.Sprintf("model = \"gpt-5\"\nopenai_base_url = %q\napproval_policy = \"never\"\nsandbox_mode = \"danger-full-access\"\ntool_output_token_limit = 40000\n", baseURL+"/v1")
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	env := cliEnv(home, "CODEX_HOME="+codexHome)
	// The built-in provider authenticates with the key Codex was logged in
	// with (OPENAI_API_KEY alone is not sent on the socket).
	login := exec.CommandContext(ctx, filepath.Join(bin, "codex"), "login", "--with-api-key")
	login.Env, login.Stdin = env, strings.NewReader("sk-test-agents-codex-ws\n")
	if out, err := login.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("codex login: %v\n%s", err, out)
	}
	last := filepath.Join(home, "last.txt")
	var finals []string
	for i, task := range agentTasks {
		args := []string{"exec", "--skip-git-repo-check", "-o", last}
		if i > 0 {
			args = append(args, "resume", "--last")
		}
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "codex"), append(args, task.prompt)...)
		cmd.Dir, cmd.Env = workdir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("codex task %d: %v\n%s", i+1, err, tail(string(out), 3000))
		}
		b, err := os.ReadFile(last)
		if err != nil {
			return nil, err
		}
		finals = append(finals, string(b))
	}
	return finals, nil
}

// wsCreates returns the response.create messages the provider got over
// its sockets and their bytes.
func wsCreates(p *agentProvider) (bodies [][]byte, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.reqs {
		if bytes.HasPrefix(r.Body, []byte(`{"type":"response.create"`)) {
			bodies = append(bodies, r.Body)
			total += len(r.Body)
		}
	}
	return bodies, total
}

// The real Codex CLI with its default configuration (built-in provider,
// Responses WebSocket) runs the scripted tasks directly and through Caddy:
// it finishes the same way, the provider's script is the same, every
// forwarded message obeys the Responses rules, each is logged, and the
// bytes at the provider fall.
func TestCodexWebSocketDefault(t *testing.T) {
	needNode(t, "agent CLI test")
	bin := filepath.Join(npmInstall(t, "token-terminator-agents-test", claudeCodePackage, codexPackage), ".bin")
	ctx, cancel := context.WithTimeout(context.Background(), 170*time.Second)
	defer cancel()

	directDir := t.TempDir()
	writeAgentFiles(t, directDir)
	direct := newAgentProvider(t, agentTasks, codexDialect{})
	dsrv, _ := wsAgentProvider(t, direct)
	want, err := runCodexBuiltin(ctx, t, bin, dsrv.URL, directDir)
	if err != nil {
		t.Skipf("Codex does not finish directly over the WebSocket here: %v", err)
	}
	directCreates, directBytes := wsCreates(direct)
	if len(directCreates) == 0 {
		t.Skip("Codex sent nothing over the WebSocket (it fell back to HTTPS)")
	}

	gwDir := t.TempDir()
	writeAgentFiles(t, gwDir)
	prov := newAgentProvider(t, agentTasks, codexDialect{})
	psrv, histories := wsAgentProvider(t, prov)
	g := startGateway(t, wsSnippet, &upstream{Server: psrv})
	got, err := runCodexBuiltin(ctx, t, bin, g.URL, gwDir)
	if err != nil {
		t.Fatalf("through the gateway: %v", err)
	}
	if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
		t.Fatalf("Codex finished differently through the gateway:\n%q\ndirectly:\n%q", got, want)
	}
	if a, b := strings.Join(prov.script(), ","), strings.Join(direct.script(), ","); a != b {
		t.Fatalf("script through the gateway %s, directly %s", a, b)
	}
	creates, gwBytes := wsCreates(prov)
	// Every message through the gateway, rewritten or not, continues a
	// history the provider holds: the Responses rules hold on each whole
	// history the model was given.
	hs := histories()
	if len(hs) == 0 {
		t.Fatal("no scripted message reached the provider")
	}
	for i, b := range hs {
		if err := compiler.CheckRules("/v1/responses", b); err != nil {
			t.Fatalf("history %d breaks the Responses rules: %v", i, err)
		}
	}
	chained := 0
	for _, b := range creates {
		if bytes.Contains(b, []byte(`"previous_response_id":"resp_t`)) {
			chained++
		}
	}
	logged := 0
	for _, l := range g.logLines() {
		if strings.Contains(l, `"msg":"websocket message"`) {
			logged++
		}
	}
	if logged < len(creates) {
		for _, l := range g.logLines() {
			t.Log(tail(l, 400))
		}
		t.Fatalf("%d websocket message lines for %d response.create messages", logged, len(creates))
	}
	drop := 1 - float64(gwBytes)/float64(directBytes)
	t.Logf("Codex default (WebSocket): %d response.create messages (%d continuing previous_response_id); provider bytes direct %d, through the gateway %d (%.1f%% fewer)",
		len(creates), chained, directBytes, gwBytes, 100*drop)
	if drop < 0.30 {
		t.Fatalf("bytes at the provider fell by %.1f%%, want at least 30%%", 100*drop)
	}
}
