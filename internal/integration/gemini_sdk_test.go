package integration

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/fakeprovider"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// geminiPackages are the npm packages of the Gemini tests (SDK and CLI),
// installed once into one cache.
var geminiPackages = []string{"@google/genai@3.3.0", "@google/gemini-cli@0.61.0"}

const geminiKey = "test-gemini-key-0123456789"

// newGeminiProvider is the loopback fake provider (fakeprovider.Provider:
// a simulated implicit cache in usageMetadata) recording every body.
func newGeminiProvider(t *testing.T) *upstream {
	u := &upstream{}
	fake := &fakeprovider.Provider{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if answerVerification(w, r) {
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		u.mu.Lock()
		u.reqs = append(u.reqs, received{Method: r.Method, Path: r.URL.Path + "?" + r.URL.RawQuery, Header: r.Header.Clone(), Body: body, ContentLength: r.ContentLength})
		u.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

// TestGeminiSDK drives the official @google/genai SDK, plain and
// streaming, once straight to the fake Gemini provider and once through
// Caddy with the module. Each request carries a function response
// delivered twice, thought parts and signed calls: through the gateway the
// provider must get exactly one receipt, the newest copy inline, every
// signature byte-identical, a body that passes the checker against the
// one the SDK sent directly, and the SDK must read the same answer and
// the simulated implicit cache in usageMetadata.
func TestGeminiSDK(t *testing.T) {
	needNode(t, "SDK test")
	modules := npmInstall(t, "token-terminator-gemini-test", geminiPackages...)

	out := fixtures.ToolOutput(900, 12000)
	turns := []fixtures.ChatTurn{
		{Tool: "read_file", Args: `{"absolute_path":"/w/big.py"}`, Output: out},
		{Tool: "run_shell_command", Args: `{"command":"ls"}`, Output: fixtures.ToolOutput(901, 300)},
		{Tool: "read_file", Args: `{"absolute_path":"/w/big.py"}`, Output: out},
	}
	body := fixtures.GeminiBody(turns, "go on", fixtures.GeminiOptions{Thoughts: true, Parallel: true})
	work := nodeWork(t, modules, geminiSDKScript, map[string][]byte{"body.json": body})
	run := func(base string) map[string]string {
		return runNode(t, work, base, filepath.Join(work, "body.json"))
	}

	direct := newGeminiProvider(t)
	want := run(direct.URL)

	prov := newGeminiProvider(t)
	g := startGateway(t, corpusSnippet, prov)
	g.verify(fixtures.GeminiPath("gemini-2.5-pro", false), "X-Goog-Api-Key: "+geminiKey)
	got := run(g.URL)
	t.Logf("SDK %s: direct %v, gateway %v", got["version"], want, got)
	for _, k := range []string{"plain", "stream"} {
		if !strings.HasPrefix(got[k], "Fake answer to ") || got[k+"_prompt"] == "" {
			t.Errorf("%s: SDK got %q (usage %q)", k, got[k], got[k+"_prompt"])
		}
	}
	// The second request (streaming) extends the first one's prefix: the
	// fake reports it read from the implicit cache, and the SDK reads it.
	if got["stream_cached"] == "" || got["stream_cached"] == "0" {
		t.Errorf("stream: cachedContentTokenCount %q, want a cache read", got["stream_cached"])
	}

	sent, orig := prov.all(), direct.all()
	if len(sent) != 2 || len(orig) != 2 {
		t.Fatalf("provider got %d requests through the gateway, %d direct; want 2 and 2", len(sent), len(orig))
	}
	for i, r := range sent {
		path := strings.SplitN(r.Path, "?", 2)[0]
		if path != strings.SplitN(orig[i].Path, "?", 2)[0] {
			t.Fatalf("request %d: path %s through the gateway, %s direct", i, r.Path, orig[i].Path)
		}
		if n := bytes.Count(r.Body, []byte(artifact.ReceiptPrefix)); n != 1 {
			t.Errorf("%s: %d receipts in the body the provider got", path, n)
		}
		if !bytes.Contains(r.Body, jsonString(out)) {
			t.Errorf("%s: newest copy not inline", path)
		}
		if err := compiler.CheckRewriteKeyed(path, orig[i].Body, r.Body); err != nil {
			t.Errorf("%s: checker: %v", path, err)
		}
		if err := compiler.CheckRules(path, r.Body); err != nil {
			t.Errorf("%s: rules: %v", path, err)
		}
		for k := range turns {
			sig := []byte(`"thoughtSignature":"` + fixtures.GeminiSignature(k) + `"`)
			if bytes.Count(r.Body, sig) != 1 || bytes.Count(orig[i].Body, sig) != 1 {
				t.Errorf("%s: signature %d not byte-identical", path, k)
			}
		}
		if r.Header.Get("X-Goog-Api-Key") != geminiKey {
			t.Errorf("%s: credential not forwarded", path)
		}
		if r.ContentLength != int64(len(r.Body)) {
			t.Errorf("%s: Content-Length %d for %d bytes", path, r.ContentLength, len(r.Body))
		}
		t.Logf("%s: %d bytes direct, %d through the gateway", r.Path, len(orig[i].Body), len(r.Body))
	}
	if !strings.Contains(sent[1].Path, "alt=sse") {
		t.Errorf("stream path %s", sent[1].Path)
	}
	logs, _ := os.ReadFile(g.LogFile)
	if bytes.Contains(logs, []byte(geminiKey)) {
		t.Error("the Gemini key is in the log")
	}
}

// geminiSDKScript drives @google/genai: argv[2] is the base URL, argv[3]
// a generateContent body. It prints the text and usage each call got.
const geminiSDKScript = `
import fs from 'node:fs';
import { GoogleGenAI } from '@google/genai';
const [base, file] = process.argv.slice(2);
const body = JSON.parse(fs.readFileSync(file, 'utf8'));
const ai = new GoogleGenAI({ apiKey: '` + geminiKey + `', httpOptions: { baseUrl: base } });
const req = { model: 'gemini-2.5-pro', contents: body.contents,
  config: { systemInstruction: body.systemInstruction, tools: body.tools, temperature: 0 } };
const out = {};
out.version = JSON.parse(fs.readFileSync('node_modules/@google/genai/package.json', 'utf8')).version;
const r = await ai.models.generateContent(req);
out.plain = r.text;
out.plain_prompt = String(r.usageMetadata?.promptTokenCount ?? '');
let s = '';
let last;
for await (const c of await ai.models.generateContentStream(req)) {
  s += c.text ?? '';
  if (c.usageMetadata) last = c.usageMetadata;
}
out.stream = s;
out.stream_prompt = String(last?.promptTokenCount ?? '');
out.stream_cached = String(last?.cachedContentTokenCount ?? '');
process.stdout.write(JSON.stringify(out));
`
