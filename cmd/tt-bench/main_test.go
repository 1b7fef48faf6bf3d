package main

import (
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

// TestShortRun builds the Caddy binary and the command, and runs the
// command's short mode: a few requests of every format and case. It asserts
// only that the command succeeds (every answer was the provider's, every
// forwarded body JSON, every timed request compiled with all its receipts)
// and that every case's figures are printed; never a timing.
func TestShortRun(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build the binary with")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	caddyBin := filepath.Join(dir, "caddy")
	if err := buildCaddy(ctx, root, caddyBin, ""); err != nil {
		t.Fatal(err)
	}
	benchBin := filepath.Join(dir, "tt-bench")
	build := exec.CommandContext(ctx, "go", "build", "-o", benchBin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/tt-bench: %v\n%s", err, out)
	}

	runBench := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, benchBin, append([]string{"-short", "-caddy", caddyBin}, args...)...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("tt-bench %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		return stdout.String()
	}

	out := runBench()
	num := `-?[0-9]+\.[0-9]+`
	for _, f := range []string{"chat", "responses", "anthropic"} {
		for _, m := range []string{"warm", "cold", "first"} {
			re := regexp.MustCompile(fmt.Sprintf(`(?m)^%s 256KB %s +conn=new n=[0-9]+ +added p50 %s +p99 %s +p999 %s ms .* caddy CPU %s ms/req +[0-9]+ faults/req +peak RSS [0-9.]+ MB .* load [0-9. ]+$`,
				f, m, num, num, num, num))
			if !re.MatchString(out) {
				t.Errorf("no figures for %s %s in:\n%s", f, m, out)
			}
		}
	}

	md := runBench("-markdown", "-formats", "chat", "-modes", "warm", "-conn", "keep")
	if !strings.Contains(md, "| case | n | added p50 / p99 / p999 ms |") ||
		!regexp.MustCompile(`(?m)^\| chat 256KB warm \| [0-9]+ \| `+num+` / `+num+` / `+num+` \|`).MatchString(md) {
		t.Errorf("no Markdown table in:\n%s", md)
	}

	// -floor: the same requests through reverse_proxy alone. Every answer
	// must come back without the gateway's header and the whole body must
	// reach the provider; the rows are printed, the gateway's targets not.
	floor := runBench("-floor", "-markdown", "-formats", "chat", "-modes", "warm")
	if !strings.Contains(floor, "`reverse_proxy` alone") ||
		!regexp.MustCompile(`(?m)^\| chat 256KB warm \| [0-9]+ \| `+num+` / `+num+` / `+num+` \|.*\| ([0-9]+) → ([0-9]+) \|`).MatchString(floor) ||
		strings.Contains(floor, "| target |") {
		t.Errorf("-floor: no floor table, or targets printed, in:\n%s", floor)
	}
	if m := regexp.MustCompile(`\| ([0-9]+) → ([0-9]+) \|`).FindStringSubmatch(floor); m == nil || m[1] != m[2] {
		t.Errorf("-floor: the provider should get the body as it came: %v", m)
	}
	refused := exec.CommandContext(ctx, benchBin, "-floor", "-modes", "warm,cold", "-caddy", caddyBin)
	if out, err := refused.CombinedOutput(); err == nil || !strings.Contains(string(out), `-modes "cold"`) {
		t.Errorf("-floor -modes warm,cold: want refused naming cold, got %v: %s", err, out)
	}
}

// TestCheckAnswer: the client accepts the sink's answers and refuses
// anything else (so a gateway that changed or lost the answer fails the
// run).
func TestCheckAnswer(t *testing.T) {
	s, err := startSink()
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	c := newClient(true)
	ctx := context.Background()
	for _, sh := range shapes {
		prev, _ := conversation(sh, 1, 1, 2)
		if _, err := c.post(ctx, "http://"+s.addr, sh.path, "Bearer t", prev); err != nil {
			t.Errorf("%s: the sink's answer refused: %v", sh.name, err)
		}
	}
	for _, tc := range []struct{ path, answer string }{
		{"/v1/chat/completions", `{"id":"chatcmpl-bench","choices":[{"message":{"content":"Done."}}]}`}, // no usage
		{"/v1/chat/completions", `{"id":"resp_bench","output":[{"content":[{"text":"Done."}]}],"usage":{}}`},
		{"/v1/messages", `{"id":"msg_bench","content":[{"text":"Done!"}],"usage":{}}`},
		{"/v1/responses", `{"id":"resp_bench","output":[{"content":[{"text":"Done."}]}],"usage":{}`},
		{"/v1/responses", `bad gateway`},
	} {
		if err := checkAnswer(tc.path, []byte(tc.answer)); err == nil {
			t.Errorf("%s: %s accepted", tc.path, tc.answer)
		}
	}
	if p := s.problems(); len(p) > 0 {
		t.Errorf("sink problems: %v", p)
	}
	// A forwarded body that is not JSON is noted.
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.addr+"/v1/messages", strings.NewReader(`{"model":`))
	req.Header.Set("X-Forwarded-For", "127.0.0.1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The sink checks a forwarded body after it has answered.
	var p []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if p = s.problems(); len(p) > 0 {
			break
		}
	}
	if len(p) != 1 {
		t.Errorf("a forwarded body that is not JSON: problems %v, want one", p)
	}
}

// TestConversationsShareNoIdentifiers: cold content is new to the process;
// two conversations have no identifier in common, one conversation repeats
// its own.
func TestConversationsShareNoIdentifiers(t *testing.T) {
	sh, _ := shapeNamed("chat")
	common := map[string]bool{`"q"`: true}
	for _, w := range commonWords {
		common[w] = true
	}
	// words counts the identifiers of a conversation's tool outputs.
	words := func(k int) map[string]int {
		_, body := conversation(sh, 7, k, 3)
		var req struct {
			Messages []struct {
				Role    string
				Content any
			}
		}
		if err := json.Unmarshal(body, &req); err != nil {
			t.Fatal(err)
		}
		m := map[string]int{}
		for _, msg := range req.Messages {
			if msg.Role != "tool" {
				continue
			}
			for _, w := range strings.Fields(msg.Content.(string)) {
				if _, err := strconv.Atoi(w); err != nil && !common[w] {
					m[w]++
				}
			}
		}
		return m
	}
	a, b := words(1), words(2)
	repeated := 0
	for w, n := range a {
		if b[w] > 0 {
			t.Errorf("identifier %q in two conversations", w)
		}
		if n > 1 {
			repeated++
		}
	}
	if repeated < 50 {
		t.Errorf("%d identifiers repeated within a conversation, want many", repeated)
	}
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		if _, err := cpuTicks(os.Getpid()); err != nil {
			t.Errorf("cpuTicks: %v", err)
		}
	}
}
