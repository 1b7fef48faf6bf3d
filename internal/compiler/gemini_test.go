package compiler_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

var geminiPath = fixtures.GeminiPath("gemini-2.5-pro", false)

func TestGeminiFormatFor(t *testing.T) {
	tests := []struct {
		method, path string
		want         provider.Format
	}{
		{"POST", "/v1beta/models/gemini-2.5-pro:generateContent", "gemini"},
		{"POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent", "gemini"},
		{"POST", "/v1/projects/p1/locations/us-central1/publishers/google/models/gemini-2.5-pro:generateContent", "gemini"},
		{"POST", "/v1/projects/p1/locations/global/publishers/google/models/gemini-3-pro:streamGenerateContent", "gemini"},
		{"POST", "/v1beta/models/gemini-2.5-pro:countTokens", ""},
		{"POST", "/v1beta/models/text-embedding-004:embedContent", ""},
		{"GET", "/v1beta/models/gemini-2.5-pro:generateContent", ""},
	}
	for _, tt := range tests {
		got, ok := compiler.FormatFor(tt.method, tt.path)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("FormatFor(%s %s) = %q %v, want %q", tt.method, tt.path, got, ok, tt.want)
		}
	}
}

// geminiParts returns the parts of content i of a Gemini body.
func geminiParts(t testing.TB, body []byte, i int) []any {
	t.Helper()
	contents := decode(t, body)["contents"].([]any)
	return contents[i].(map[string]any)["parts"].([]any)
}

func TestGeminiDuplicates(t *testing.T) {
	out := fixtures.ToolOutput(1, 9000)
	turns := []fixtures.ChatTurn{
		{Tool: "read_file", Args: `{"absolute_path":"/a.py"}`, Output: out},
		{Tool: "run_shell_command", Args: `{"command":"ls"}`, Output: fixtures.ToolOutput(2, 9000)},
		{Tool: "read_file", Args: `{"absolute_path":"/a.py"}`, Output: out},
	}
	for _, o := range []fixtures.GeminiOptions{{}, {Thoughts: true}, {Parallel: true}, {Thoughts: true, Parallel: true}} {
		for _, stream := range []bool{false, true} {
			path := fixtures.GeminiPath("gemini-2.5-pro", stream)
			body := fixtures.GeminiBody(turns, "go on", o)
			store := compilertest.NewMemStore()
			c := newCompiler(t, compiler.Options{}, store, nil)
			res := compileAt(c, path, "t1", body)
			if res.Decision != compiler.Accepted || res.Receipts != 1 || res.Format != "gemini" || res.Model != "gemini-2.5-pro" {
				t.Fatalf("%+v: %s/%s receipts %d format %s model %q", o, res.Decision, res.Reason, res.Receipts, res.Format, res.Model)
			}
			assertValidRewrite(t, path, body, res)
			// The older copy is the receipt; the object around it and the
			// part's name are byte for byte.
			fr := geminiParts(t, res.Body, 2)[0].(map[string]any)["functionResponse"].(map[string]any)
			s, _ := fr["response"].(map[string]any)["output"].(string)
			if !strings.HasPrefix(s, artifact.ReceiptPrefix) || !strings.Contains(s, "tool=read_file") || fr["name"] != "read_file" {
				t.Fatalf("older copy not receipted: %.80q", s)
			}
			newest := geminiParts(t, res.Body, 6)[0].(map[string]any)["functionResponse"].(map[string]any)
			if newest["response"].(map[string]any)["output"] != out {
				t.Fatal("newest copy not inline")
			}
			// Thoughts and signatures byte-identical and in place.
			if o.Thoughts {
				for i := range turns {
					sig := `"thoughtSignature":"` + fixtures.GeminiSignature(i) + `"`
					mustContainOnce(t, res.Body, sig)
					if bytes.Index(res.Body, []byte(sig)) < bytes.Index(res.Body, []byte(fmt.Sprintf(`"Considering step %d."`, i))) {
						t.Fatal("signature moved before its thought")
					}
				}
			}
			d := storedDigest(store, "t1", out)
			if a, ok, _ := store.Get(t.Context(), "t1", d); !ok || a.Text != out || a.Tool != "read_file" || a.Args != `{"absolute_path":"/a.py"}` {
				t.Fatalf("artifact not stored with provenance: ok=%v tool=%q args=%q", ok, a.Tool, a.Args)
			}
		}
	}
}

// The response object keeps every member but the replaced string byte for
// byte: the receipt replaces the largest string value, not the object.
func TestGeminiResponseObjectKept(t *testing.T) {
	big := fixtures.ToolOutput(7, 9000)
	resp := `{"exit_code":0,"stderr":"","output":` + jstr(big) + `,"meta":{"cwd":"/w","n":[1,2]}}`
	contents := `[{"role":"user","parts":[{"text":"run it"}]},` +
		`{"role":"model","parts":[{"functionCall":{"name":"run_shell_command","args":{"command":"make"},"id":"c1"},"thoughtSignature":"c2ln"}]},` +
		`{"role":"user","parts":[{"functionResponse":{"id":"c1","name":"run_shell_command","response":` + resp + `}}]},` +
		`{"role":"model","parts":[{"functionCall":{"name":"run_shell_command","args":{"command":"make"},"id":"c2"},"thoughtSignature":"c2ln2"}]},` +
		`{"role":"user","parts":[{"functionResponse":{"id":"c2","name":"run_shell_command","response":` + resp + `}}]},` +
		`{"role":"user","parts":[{"text":"again?"}]}]`
	body := []byte(`{"contents":` + contents + `,"generationConfig":{"temperature":0}}`)
	res := compileAt(newCompiler(t, compiler.Options{}, compilertest.NewMemStore(), nil), geminiPath, "t", body)
	if res.Decision != compiler.Accepted || res.Receipts != 1 {
		t.Fatalf("%s/%s receipts %d", res.Decision, res.Reason, res.Receipts)
	}
	assertValidRewrite(t, geminiPath, body, res)
	for _, keep := range []string{`{"exit_code":0,"stderr":"","output":"` + artifact.ReceiptPrefix, `,"meta":{"cwd":"/w","n":[1,2]}}}}]}`, `"thoughtSignature":"c2ln"`, `"thoughtSignature":"c2ln2"`} {
		if !bytes.Contains(res.Body, []byte(keep)) {
			t.Fatalf("%q not kept byte for byte", keep)
		}
	}
}

func TestGeminiPassThrough(t *testing.T) {
	turns := fixtures.Turns(30, 3, 9000)
	tests := []struct {
		name string
		body []byte
		want compiler.Reason
	}{
		{"not an object", []byte(`[1]`), compiler.ReasonUnknownShape},
		{"no contents", []byte(`{"model":"x"}`), compiler.ReasonUnknownShape},
		{"contents not a list", []byte(`{"contents":{"role":"user"}}`), compiler.ReasonUnknownShape},
		{"parts not a list", []byte(`{"contents":[{"role":"user","parts":"hi"}]}`), compiler.ReasonUnknownShape},
		{"small results", fixtures.GeminiBody(fixtures.Turns(1, 3, 100), "go", fixtures.GeminiOptions{}), compiler.ReasonNoSlots},
		{"unique results", fixtures.GeminiBody(turns, "go", fixtures.GeminiOptions{Thoughts: true}), compiler.ReasonNothingToDo},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := compileAt(newCompiler(t, compiler.Options{}, compilertest.NewMemStore(), nil), geminiPath, "t", tt.body)
			if res.Decision != compiler.Passthrough || res.Reason != tt.want || !bytes.Equal(res.Body, tt.body) {
				t.Fatalf("%s/%s, want pass-through %s", res.Decision, res.Reason, tt.want)
			}
		})
	}
}

// A request on an explicit cache is compiled over its contents (all of
// which follow the cache), and carries no recovery tool: such a request may
// set no tools.
func TestGeminiCachedContent(t *testing.T) {
	out := fixtures.ToolOutput(3, 9000)
	turns := []fixtures.ChatTurn{{Tool: "read_file", Args: `{}`, Output: out}, {Tool: "read_file", Args: `{}`, Output: out}}
	var v map[string]any
	if err := json.Unmarshal(fixtures.GeminiBody(turns, "go", fixtures.GeminiOptions{}), &v); err != nil {
		t.Fatal(err)
	}
	delete(v, "tools")
	delete(v, "systemInstruction")
	v["cachedContent"] = "cachedContents/abc123"
	body, _ := json.Marshal(v)
	opts := recoveryOptions()
	opts.Recovery.Tools.Gemini = `{"functionDeclarations":[{"name":"token_terminator","description":"x","parameters":{"type":"object"}}]}`
	res := compileAt(newCompiler(t, opts, compilertest.NewMemStore(), nil), geminiPath, "t", body)
	if res.Decision != compiler.Accepted || res.Receipts != 1 || res.RecoveryTool {
		t.Fatalf("%s/%s receipts %d tool %v", res.Decision, res.Reason, res.Receipts, res.RecoveryTool)
	}
	if bytes.Contains(res.Body, []byte(`"tools"`)) || !bytes.Contains(res.Body, []byte(apiHint)) || bytes.Contains(res.Body, []byte(toolHint)) {
		t.Fatal("a cachedContent request got a tool or a tool hint")
	}
	mustContainOnce(t, res.Body, `"cachedContent":"cachedContents/abc123"`)
	// Without it, the same request gets the tool after the client's tools.
	res = compileAt(newCompiler(t, opts, compilertest.NewMemStore(), nil), geminiPath, "t",
		fixtures.GeminiBody(turns, "go", fixtures.GeminiOptions{}))
	if !res.RecoveryTool || !bytes.Contains(res.Body, []byte(`}]},`+opts.Recovery.Tools.Gemini+`]`)) {
		t.Fatalf("tool not appended after the client's: %v", res.RecoveryTool)
	}
	// No Gemini definition configured: the receipts name the API, not a tool.
	noGemini := recoveryOptions()
	noGemini.Recovery.Tools.Gemini = ""
	res = compileAt(newCompiler(t, noGemini, compilertest.NewMemStore(), nil), geminiPath, "t",
		fixtures.GeminiBody(turns, "go", fixtures.GeminiOptions{}))
	if res.RecoveryTool || !bytes.Contains(res.Body, []byte(apiHint)) || bytes.Contains(res.Body, []byte(toolHint)) {
		t.Fatalf("tool %v without a Gemini definition", res.RecoveryTool)
	}
}

// geminiConversation renders n turns: user text, a model content with a
// thought and a signed functionCall, the user's functionResponse, and the
// model's text.
func geminiConversation(n int) []byte {
	var contents []any
	for i := 0; i < n; i++ {
		contents = append(contents,
			map[string]any{"role": "user", "parts": []any{map[string]any{"text": fmt.Sprintf("Question %d", i)}}},
			map[string]any{"role": "model", "parts": []any{
				map[string]any{"text": "hmm", "thought": true},
				map[string]any{"functionCall": map[string]any{"name": "read_file", "args": map[string]any{"absolute_path": fmt.Sprintf("/f%d", i)}}, "thoughtSignature": fmt.Sprintf("sig%d==", i)},
				map[string]any{"functionCall": map[string]any{"name": "read_file", "args": map[string]any{"absolute_path": fmt.Sprintf("/g%d", i)}}}}},
			map[string]any{"role": "user", "parts": []any{
				map[string]any{"functionResponse": map[string]any{"name": "read_file", "response": map[string]any{"output": fixtures.ToolOutput(700+i, 5000)}}},
				map[string]any{"functionResponse": map[string]any{"name": "read_file", "response": map[string]any{"output": "short"}}}}},
			map[string]any{"role": "model", "parts": []any{map[string]any{"text": fmt.Sprintf("Done %d.", i)}}})
	}
	contents = append(contents, map[string]any{"role": "user", "parts": []any{map[string]any{"text": "Thanks, go on."}}})
	b, _ := json.Marshal(map[string]any{"contents": contents,
		"systemInstruction": map[string]any{"parts": []any{map[string]any{"text": "You are Gemini CLI."}}}})
	return b
}

func TestGeminiCompaction(t *testing.T) {
	body := geminiConversation(12)
	store := compilertest.NewMemStore()
	c := newCompiler(t, compactOpts(5, 6), store, nil)
	res := compileAt(c, geminiPath, "t", body)
	if res.Folded != 6 || res.Receipts != 1 {
		t.Fatalf("folded %d receipts %d (%s/%s)", res.Folded, res.Receipts, res.Decision, res.Reason)
	}
	if err := compiler.CheckCompacted(geminiPath, body, res.Body); err != nil {
		t.Fatal(err)
	}
	if err := compiler.CheckRules(geminiPath, res.Body); err != nil {
		t.Fatal(err)
	}
	again := compileAt(newCompiler(t, compactOpts(5, 6), compilertest.NewMemStore(), nil), geminiPath, "t", body)
	if !bytes.Equal(again.Body, res.Body) {
		t.Fatal("not deterministic")
	}
	// Summaries are user contents of one text part; the recent turns'
	// signatures are byte-identical; a folded turn's call left with its
	// response.
	contents := decode(t, res.Body)["contents"].([]any)
	summary := contents[0].(map[string]any)
	if summary["role"] != "user" || !strings.HasPrefix(summary["parts"].([]any)[0].(map[string]any)["text"].(string), artifact.FoldPrefix) {
		t.Fatalf("summary shape: %v", summary)
	}
	for i := 6; i < 12; i++ {
		mustContainOnce(t, res.Body, fmt.Sprintf(`"thoughtSignature":"sig%d=="`, i))
	}
	for i := 0; i < 6; i++ {
		if bytes.Contains(res.Body, []byte(fmt.Sprintf(`"sig%d=="`, i))) || bytes.Contains(res.Body, []byte(fmt.Sprintf(`"/g%d"`, i))) {
			t.Fatalf("folded turn %d left a part behind", i)
		}
	}
	if strings.Count(string(res.Body), artifact.FoldPrefix) != 6 {
		t.Fatal("summary count")
	}
	for _, a := range store.All("t") {
		if a.Tool == "turn" && !bytes.Contains(body, []byte(a.Text)) {
			t.Fatal("vaulted turn is not original bytes")
		}
	}
}

// Leases: an answered result goes out as a receipt on later requests of
// the conversation; retries compile to the same bytes.
func TestGeminiLeases(t *testing.T) {
	turns := fixtures.Turns(40, 3, 9000)
	c := newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
	var last compiler.Result
	var lastBody []byte
	for i := 1; i <= 3; i++ {
		lastBody = fixtures.GeminiBody(turns[:i], "", fixtures.GeminiOptions{Thoughts: true})
		last = compileAt(c, geminiPath, "t", lastBody)
		assertValidRewrite(t, geminiPath, lastBody, last)
	}
	if last.Decision != compiler.Accepted || last.Receipts != 2 {
		t.Fatalf("%s/%s receipts %d", last.Decision, last.Reason, last.Receipts)
	}
	retry := compileAt(c, geminiPath, "t", lastBody)
	if !bytes.Equal(retry.Body, last.Body) {
		t.Fatal("retry compiled to other bytes")
	}
	other := compileAt(c, geminiPath, "u", lastBody)
	if other.Receipts != 0 {
		t.Fatal("another tenant got leases")
	}
}

// The checker's cases: each broken rewrite of a valid original is refused.
func TestGeminiChecker(t *testing.T) {
	out := fixtures.ToolOutput(5, 9000)
	turns := []fixtures.ChatTurn{{Tool: "read_file", Args: `{}`, Output: out}, {Tool: "read_file", Args: `{}`, Output: out}}
	body := fixtures.GeminiBody(turns, "go", fixtures.GeminiOptions{Thoughts: true, Parallel: true})
	res := compileAt(newCompiler(t, compiler.Options{}, compilertest.NewMemStore(), nil), geminiPath, "t", body)
	if res.Decision != compiler.Accepted {
		t.Fatalf("%s/%s", res.Decision, res.Reason)
	}
	good := res.Body
	if err := compiler.CheckRewrite(geminiPath, body, good); err != nil {
		t.Fatal(err)
	}
	sig0 := fixtures.GeminiSignature(0)
	tests := []struct {
		name string
		edit func([]byte) []byte
	}{
		{"signature changed", func(b []byte) []byte { return bytes.Replace(b, []byte(sig0), []byte("AAAA"), 1) }},
		{"signature dropped", func(b []byte) []byte {
			return bytes.Replace(b, []byte(`,"thoughtSignature":"`+sig0+`"`), nil, 1)
		}},
		{"thought text changed", func(b []byte) []byte {
			return bytes.Replace(b, []byte(`Considering step 1.`), []byte(`Considering step 9.`), 1)
		}},
		{"response name changed", func(b []byte) []byte {
			return bytes.Replace(b, []byte(`{"functionResponse":{"name":"read_file"`), []byte(`{"functionResponse":{"name":"read_fil"`), 1)
		}},
		{"response object replaced by a string", func(b []byte) []byte {
			i := bytes.Index(b, []byte(`"response":{"output":"`+artifact.ReceiptPrefix))
			j := bytes.Index(b[i:], []byte(`"}}`))
			return append(append(append([]byte{}, b[:i]...), `"response":"x"}`...), b[i+j+3:]...)
		}},
		{"role changed", func(b []byte) []byte {
			return bytes.Replace(b, []byte(`{"parts":[{"text":"Considering step 0.","thought":true}`), []byte(`{"parts":[{"text":"Considering step 0.","thought":false}`), 1)
		}},
		{"system instruction changed", func(b []byte) []byte {
			return bytes.Replace(b, []byte(`You are a coding agent.`), []byte(`You are a coding agent!`), 1)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := tt.edit(good)
			if bytes.Equal(bad, good) {
				t.Fatal("edit did not apply")
			}
			if err := compiler.CheckRewrite(geminiPath, body, bad); err == nil {
				t.Fatal("checker accepted a broken rewrite")
			}
		})
	}
	// Rules on one body: a call without its response, a response without its call.
	rules := []struct {
		name string
		body string
		ok   bool
	}{
		{"paired", `{"contents":[{"role":"model","parts":[{"functionCall":{"name":"a"}},{"functionCall":{"name":"b"}}]},{"role":"user","parts":[{"functionResponse":{"name":"b","response":{}}},{"functionResponse":{"name":"a","response":{}}}]}]}`, true},
		{"paired by id", `{"contents":[{"role":"model","parts":[{"functionCall":{"name":"a","id":"1"}},{"functionCall":{"name":"a","id":"2"}}]},{"role":"user","parts":[{"functionResponse":{"name":"a","id":"2","response":{}}},{"functionResponse":{"name":"a","id":"1","response":{}}}]}]}`, true},
		{"unanswered", `{"contents":[{"role":"model","parts":[{"functionCall":{"name":"a"}},{"functionCall":{"name":"b"}}]},{"role":"user","parts":[{"functionResponse":{"name":"a","response":{}}}]}]}`, false},
		{"orphan", `{"contents":[{"role":"user","parts":[{"text":"x"}]},{"role":"user","parts":[{"functionResponse":{"name":"a","response":{}}}]}]}`, false},
		{"wrong id", `{"contents":[{"role":"model","parts":[{"functionCall":{"name":"a","id":"1"}}]},{"role":"user","parts":[{"functionResponse":{"name":"a","id":"2","response":{}}}]}]}`, false},
		{"text between", `{"contents":[{"role":"model","parts":[{"functionCall":{"name":"a"}}]},{"role":"user","parts":[{"text":"x"}]},{"role":"user","parts":[{"functionResponse":{"name":"a","response":{}}}]}]}`, false},
	}
	for _, tt := range rules {
		if err := compiler.CheckRules(geminiPath, []byte(tt.body)); (err == nil) != tt.ok {
			t.Errorf("%s: rules %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

// Golden receipts: the bytes of a Gemini rewrite are fixed by the request
// (determinism); -update rewrites the file.
func TestGeminiGolden(t *testing.T) {
	out := fixtures.ToolOutput(11, 6000)
	turns := []fixtures.ChatTurn{
		{Tool: "read_file", Args: `{"absolute_path":"/src/a.go"}`, Output: out},
		{Tool: "run_shell_command", Args: `{"command":"go test ./..."}`, Output: fixtures.ToolOutput(12, 500)},
		{Tool: "read_file", Args: `{"absolute_path":"/src/a.go"}`, Output: out},
	}
	body := fixtures.GeminiBody(turns, "go on", fixtures.GeminiOptions{Thoughts: true})
	res := compileAt(newCompiler(t, compiler.Options{}, compilertest.NewMemStore(), nil), geminiPath, "t", body)
	if res.Decision != compiler.Accepted {
		t.Fatalf("%s/%s", res.Decision, res.Reason)
	}
	var receipts []string
	for _, p := range geminiParts(t, res.Body, 2) {
		s := p.(map[string]any)["functionResponse"].(map[string]any)["response"].(map[string]any)["output"].(string)
		receipts = append(receipts, s)
	}
	got := strings.Join(receipts, "\n") + "\n"
	file := filepath.Join("testdata", "gemini_receipts.golden")
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (UPDATE_GOLDEN=1 writes it)", err)
	}
	if got != string(want) {
		t.Fatalf("receipt changed:\n got %q\nwant %q", got, want)
	}
}

// Gemini CLI's session context (<session_context>…) is a text part of
// the first user content, before the person's words: when that turn folds,
// the part stays, byte for byte, as a content of its own.
func TestGeminiSessionContextPinned(t *testing.T) {
	var v map[string]any
	if err := json.Unmarshal(geminiConversation(12), &v); err != nil {
		t.Fatal(err)
	}
	ctx := map[string]any{"text": "<session_context>\nThis is the Gemini CLI. We are setting up the context for our chat.\nMy operating system is: linux\n</session_context>"}
	first := v["contents"].([]any)[0].(map[string]any)
	first["parts"] = append([]any{ctx}, first["parts"].([]any)...)
	body, _ := json.Marshal(v)
	res := compileAt(newCompiler(t, compactOpts(5, 6), compilertest.NewMemStore(), nil), geminiPath, "t", body)
	if res.Folded == 0 {
		t.Fatalf("nothing folded (%s/%s)", res.Decision, res.Reason)
	}
	if err := compiler.CheckCompacted(geminiPath, body, res.Body); err != nil {
		t.Fatal(err)
	}
	part, _ := json.Marshal(ctx)
	if !bytes.HasPrefix(res.Body, []byte(`{"contents":[{"parts":[`+string(part)+`],"role":"user"},{"role":"user","parts":[{"text":"`+artifact.FoldPrefix)) {
		t.Fatalf("session context not kept first: %.300s", res.Body)
	}
}
