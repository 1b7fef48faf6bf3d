package integration

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// example is Caddyfile.example running in this process: its gateway and
// savings sites moved to free loopback ports, the admin endpoint off, the
// access log written to a file, and its upstreams set through the example's
// own TT_* variables.
type example struct {
	gw        *gateway
	savings   string // base URL of the savings site
	accessLog string
}

// startExample loads config (a path relative to the repository root, e.g.
// Caddyfile.example); the caller sets its TT_* variables.
func startExample(t *testing.T, config string) *example {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("../..", config))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	ex := &example{accessLog: filepath.Join(tmp, "access.log")}
	gwPort, savingsPort := freePort(t), freePort(t)
	text := string(data)
	for _, r := range [][2]string{
		{"admin localhost:2019", "admin off\n\tpersist_config off"},
		{"vault badger {\n", fmt.Sprintf("vault badger {\n\t\t\tdir %q\n", filepath.Join(tmp, "vault"))},
		{"\n:8080 {", fmt.Sprintf("\n:%d {", gwPort)},
		{"\n:8081 {", fmt.Sprintf("\n:%d {", savingsPort)},
		{"\tlog {\n", fmt.Sprintf("\tlog {\n\t\toutput file %q\n", ex.accessLog)},
	} {
		if !strings.Contains(text, r[0]) {
			t.Fatalf("%s no longer contains %q", config, r[0])
		}
		text = strings.Replace(text, r[0], r[1], 1)
	}
	ex.gw = &gateway{t: t, port: gwPort, URL: fmt.Sprintf("http://127.0.0.1:%d", gwPort), client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
	ex.savings = fmt.Sprintf("http://127.0.0.1:%d", savingsPort)
	ex.gw.load(text)
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Errorf("stopping caddy: %v", err)
		}
	})
	return ex
}

// TestCaddyfileExampleRouting runs the shipped example and checks that each
// provider's credential reaches only that provider (the Anthropic SDK's
// models.list() is GET /v1/models, a path OpenAI uses too), that the
// artifact API and the savings page answer where the example says, and that
// the access log carries none of the key headers.
func TestCaddyfileExampleRouting(t *testing.T) {
	anthropic, openai, gemini := newUpstream(t), newUpstream(t), newUpstream(t)
	t.Setenv("TT_ANTHROPIC_UPSTREAM", anthropic.URL)
	t.Setenv("TT_OPENAI_UPSTREAM", openai.URL)
	t.Setenv("TT_GEMINI_UPSTREAM", gemini.URL)
	ex := startExample(t, "Caddyfile.example")
	const antKey, oaKey, googKey = "sk-ant-api03-example-secret", "sk-proj-example-secret", "AIza-example-secret"

	cases := []struct {
		name, method, path string
		headers            []string
		want               *upstream // nil: answered by the gateway itself
		status             int
	}{
		{"Anthropic SDK models.list", "GET", "/v1/models", []string{"x-api-key: " + antKey, "anthropic-version: 2023-06-01"}, anthropic, 200},
		{"Anthropic OAuth bearer", "GET", "/v1/models", []string{"Authorization: Bearer sk-ant-oat01-example", "anthropic-version: 2023-06-01"}, anthropic, 200},
		{"Anthropic messages", "POST", "/v1/messages", []string{"x-api-key: " + antKey, "anthropic-version: 2023-06-01"}, anthropic, 200},
		{"OpenAI models.list", "GET", "/v1/models", []string{"Authorization: Bearer " + oaKey}, openai, 200},
		{"OpenAI chat", "POST", "/v1/chat/completions", []string{"Authorization: Bearer " + oaKey}, openai, 200},
		{"Gemini models.list", "GET", "/v1beta/models", []string{"x-goog-api-key: " + googKey}, gemini, 200},
		{"Gemini generateContent", "POST", "/v1beta/models/gemini-2.5-pro:generateContent", []string{"x-goog-api-key: " + googKey}, gemini, 200},
		{"Azure key", "POST", "/v1/chat/completions", []string{"api-key: " + googKey}, nil, 404},
		{"artifact API", "GET", "/token-terminator/artifacts?q=anything", []string{"Authorization: Bearer " + oaKey}, nil, 200},
	}
	for _, c := range cases {
		beforeA, beforeO, beforeG := anthropic.count(), openai.count(), gemini.count()
		var body []byte
		if c.method == "POST" {
			body = []byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
		}
		r := ex.gw.do(c.method, c.path, strings.NewReader(string(body)), int64(len(body)), c.headers...)
		if r.Status != c.status {
			t.Errorf("%s: status %d, want %d (%s)", c.name, r.Status, c.status, r.Body)
		}
		gotA, gotO, gotG := anthropic.count()-beforeA, openai.count()-beforeO, gemini.count()-beforeG
		if (c.want == gemini) != (gotG == 1) || gotG > 1 {
			t.Errorf("%s: reached Gemini %d times", c.name, gotG)
		}
		switch c.want {
		case gemini:
			if gotA+gotO != 0 {
				t.Errorf("%s: reached Anthropic %d times and OpenAI %d times, want Gemini only", c.name, gotA, gotO)
			}
		case anthropic:
			if gotA != 1 || gotO != 0 {
				t.Errorf("%s: reached Anthropic %d times and OpenAI %d times, want Anthropic once", c.name, gotA, gotO)
			}
		case openai:
			if gotA != 0 || gotO != 1 {
				t.Errorf("%s: reached Anthropic %d times and OpenAI %d times, want OpenAI once", c.name, gotA, gotO)
			}
		default:
			if gotA+gotO != 0 {
				t.Errorf("%s: forwarded upstream (Anthropic %d, OpenAI %d), want answered by the gateway", c.name, gotA, gotO)
			}
		}
		if c.method == "POST" && c.want != nil && r.TT == "" {
			t.Errorf("%s: no Token-Terminator header: the route does not compile", c.name)
		}
	}
	// The artifact API answered with its own JSON, not the catch-all.
	r := ex.gw.do("GET", "/token-terminator/artifacts?q=anything", nil, 0, "Authorization: Bearer "+oaKey)
	if !strings.Contains(string(r.Body), `"results"`) {
		t.Errorf("artifact API search answered %q, want its JSON results", r.Body)
	}

	resp, err := http.Get(ex.savings + "/tt-savings/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Errorf("savings page: status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}

	logData, err := os.ReadFile(ex.accessLog)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logData), `"/v1/models"`) {
		t.Fatalf("the access log has no request lines:\n%s", logData)
	}
	for _, secret := range []string{antKey, oaKey, googKey, "X-Api-Key", "X-Goog-Api-Key", "Api-Key"} {
		if strings.Contains(string(logData), secret) {
			t.Errorf("the access log carries %q", secret)
		}
	}
}
