package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// readmeQuickStart is the README's "Quick start" section cut into its
// fenced blocks, in order.
func readmeQuickStart(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	start := strings.Index(text, "\n## Quick start")
	if start < 0 {
		t.Fatal("README.md has no '## Quick start' section")
	}
	section := text[start+1:]
	// The section and the next one ("What the model sees", whose excerpt
	// and artifact API call come from the same run).
	for n, i := 0, 0; ; {
		j := strings.Index(section[i+1:], "\n## ")
		if j < 0 {
			break
		}
		i += j + 1
		if n++; n == 2 {
			section = section[:i]
			break
		}
	}
	var blocks []string
	for rest := section; ; {
		i := strings.Index(rest, "```")
		if i < 0 {
			break
		}
		rest = rest[i+3:]
		nl := strings.IndexByte(rest, '\n')
		end := strings.Index(rest, "\n```")
		if nl < 0 || end < 0 {
			t.Fatal("unterminated code block in the README's quick start")
		}
		blocks = append(blocks, rest[nl+1:end+1])
		rest = rest[end+4:]
	}
	return blocks
}

// goCaches are the go command's build and module caches as the user has
// them, read before TestMain points HOME at a temporary directory: a build
// there would otherwise start from empty caches.
var goCaches = func() []string {
	out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE").Output()
	f := strings.Fields(string(out))
	if err != nil || len(f) != 2 {
		return nil
	}
	return []string{"GOCACHE=" + f[0], "GOMODCACHE=" + f[1]}
}()

var ttLine = regexp.MustCompile(`(?i)^token-terminator: (accepted|passthrough=[a-z_]+); raw_bytes=(\d+); .*receipts=(\d+)`)

// idPlaceholder stands in the README for an artifact id: ids are keyed
// under the vault's tenant key, random per vault, so no id can be printed.
const idPlaceholder = "a_<id>"

// TestReadmeQuickStart runs the README's quick start as written: the fake
// provider it names, the gateway with the config and variables its command
// gives (on free ports instead of 9099, 8080 and 8081), then its curl loop,
// artifact search and artifact API call through bash. The headers must
// match the output the README shows, the provider must have received a
// receipt of the shape the README shows, the search must find that
// receipt's id as the README shows, and the call with that id in place of
// the placeholder must give the file back.
func TestReadmeQuickStart(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the README's quick start cannot run", tool)
		}
	}
	blocks := readmeQuickStart(t)
	var start, loop, output, search, hits, artifact string
	for _, b := range blocks {
		switch {
		case strings.Contains(b, "./cmd/tt-fakeprovider") && strings.Contains(b, "--config"):
			start = b
		case strings.Contains(b, "for i in"):
			loop = b
		case strings.HasPrefix(strings.ToLower(b), "token-terminator:"):
			output = b
		case strings.Contains(b, "/token-terminator/artifacts?"):
			search = b
		case strings.HasPrefix(b, `{"results":`):
			hits = b
		case strings.Contains(b, "/token-terminator/artifacts/"):
			artifact = b
		}
	}
	if start == "" || loop == "" || output == "" || search == "" || hits == "" || artifact == "" {
		t.Fatalf("the README's quick start lacks a block (start %t, requests %t, output %t, search %t, search output %t, artifact API %t)",
			start != "", loop != "", output != "", search != "", hits != "", artifact != "")
	}
	lines := strings.Split(strings.TrimSpace(start), "\n")
	if len(lines) != 2 || strings.TrimSpace(lines[0]) != "go run ./cmd/tt-fakeprovider" {
		t.Fatalf("the start block should be the fake provider's command, then the gateway's:\n%s", start)
	}

	// The fake provider, as `go run ./cmd/tt-fakeprovider` would start it.
	fakeAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	bin := filepath.Join(t.TempDir(), "tt-fakeprovider")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/tt-fakeprovider")
	build.Env = append(os.Environ(), goCaches...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the fake provider: %v\n%s", err, out)
	}
	fake := exec.Command(bin, "-listen", fakeAddr)
	fake.Stderr = os.Stderr
	if err := fake.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Process.Kill(); fake.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", fakeAddr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fake provider never listened")
		}
		time.Sleep(20 * time.Millisecond)
	}
	port := strings.NewReplacer("127.0.0.1:9099", fakeAddr)

	// The gateway: the variables and config of the README's command.
	fields := strings.Fields(lines[1])
	config := ""
	for i, f := range fields {
		if k, v, ok := strings.Cut(f, "="); ok && !strings.HasPrefix(f, "-") && config == "" && i < len(fields)-1 && fields[i+1] != "" {
			t.Setenv(k, port.Replace(v))
		}
		if f == "--config" && i+1 < len(fields) {
			config = fields[i+1]
		}
	}
	if !strings.Contains(lines[1], "go run ./cmd/caddy run") || config == "" {
		t.Fatalf("the gateway's command is not `go run ./cmd/caddy run --config …`: %s", lines[1])
	}
	ex := startExample(t, config)
	gw := strings.NewReplacer("http://localhost:8080", ex.gw.URL, "127.0.0.1:9099", fakeAddr)

	run := func(script string) string {
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", gw.Replace(script))
		cmd.Dir = "../.."
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("running the README's\n%s\n%v\n%s", script, err, out)
		}
		return string(out)
	}
	got := strings.Split(strings.TrimSpace(run(loop)), "\n")
	want := strings.Split(strings.TrimSpace(output), "\n")
	if len(got) != len(want) {
		t.Fatalf("the requests printed %d header lines, the README shows %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		g, w := ttLine.FindStringSubmatch(strings.TrimSpace(got[i])), ttLine.FindStringSubmatch(want[i])
		if g == nil || w == nil || g[1] != w[1] || g[2] != w[2] || g[3] != w[3] {
			t.Errorf("request %d: got\n  %s\nthe README shows\n  %s", i+1, got[i], want[i])
		}
	}
	if !strings.HasPrefix(want[0], "Token-Terminator: passthrough") || !strings.HasPrefix(want[len(want)-1], "Token-Terminator: accepted") {
		t.Errorf("the README's output should go from passthrough to accepted:\n%s", output)
	}

	// What the model sees: a receipt of the shape the README shows, its
	// placeholders filled with hex digits, is in the body the provider
	// received for the last request.
	readme, _ := os.ReadFile("../../README.md")
	shown := regexp.MustCompile(`\{"role":"tool","tool_call_id":"call_1","content":"\[Token Terminator artifact [^\n]*\]"\}`).Find(readme)
	if shown == nil {
		t.Fatal("the README shows no receipt")
	}
	if !strings.Contains(string(shown), idPlaceholder) {
		t.Fatalf("the README's receipt names no %s: ids differ per vault, a printed one is never the reader's:\n%s", idPlaceholder, shown)
	}
	receipt := regexp.MustCompile("^" + strings.NewReplacer(idPlaceholder, "(a_[0-9a-f]{32})", "<hex>", "[0-9a-f]{16}").
		Replace(regexp.QuoteMeta(string(shown))) + "$")
	last := run(fmt.Sprintf("curl -s 'http://%s/_fake/last?format=openai_chat'", fakeAddr))
	var body struct {
		Messages []json.RawMessage `json:"messages"`
		Tools    []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal([]byte(last), &body); err != nil {
		t.Fatalf("the fake provider's last body: %v", err)
	}
	id := ""
	for _, m := range body.Messages {
		if g := receipt.FindSubmatch(m); g != nil {
			id = string(g[1])
		}
	}
	if id == "" {
		t.Fatalf("the provider received no receipt of the README's shape %s", shown)
	}
	if n := len(body.Tools); n == 0 || body.Tools[n-1].Function.Name != "token_terminator" {
		t.Errorf("the rewrite does not end its tools with token_terminator")
	}

	// The search finds that id, in the shape the README shows.
	var shownHits, found struct {
		Results []struct {
			ArtifactID string `json:"artifact_id"`
			ToolName   string `json:"tool_name"`
			TotalChars int    `json:"total_chars"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(hits), &shownHits); err != nil || len(shownHits.Results) != 1 || shownHits.Results[0].ArtifactID != idPlaceholder {
		t.Fatalf("the README's search output is not one result named %s (%v):\n%s", idPlaceholder, err, hits)
	}
	out := run(search)
	if err := json.Unmarshal([]byte(out), &found); err != nil || len(found.Results) != 1 {
		t.Fatalf("the README's search gave %v, not one result:\n%s", err, out)
	}
	if g, w := found.Results[0], shownHits.Results[0]; g.ArtifactID != id || g.ToolName != w.ToolName || g.TotalChars != w.TotalChars {
		t.Errorf("the README's search found %+v; the README shows %+v and the receipt names %s", g, w, id)
	}

	// The artifact API call, with the id in place of the placeholder,
	// gives the file back.
	if !strings.Contains(artifact, idPlaceholder) {
		t.Fatalf("the README's artifact API call names no %s:\n%s", idPlaceholder, artifact)
	}
	var art struct {
		ArtifactID string `json:"artifact_id"`
		Content    string `json:"content"`
	}
	sc := bufio.NewScanner(strings.NewReader(run(strings.ReplaceAll(artifact, idPlaceholder, found.Results[0].ArtifactID))))
	if !sc.Scan() || json.Unmarshal(sc.Bytes(), &art) != nil || art.ArtifactID != id || !strings.HasPrefix(art.Content, "package cost\n") {
		t.Errorf("the README's artifact API call did not return the file")
	}
}
