package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/fakeprovider"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// TestOfficialSDKs drives the official openai and @anthropic-ai/sdk npm
// packages (Chat Completions, Responses and Messages, plain and streaming)
// through Caddy with the module to a local fake provider. The SDKs must get
// their responses, and the provider must receive the compiled bodies: each
// request carries a tool result duplicated in the same request, which must
// arrive as exactly one receipt with the newest copy inline.
//
// Skipped with -short or when node/npm are missing. The npm install is
// cached under os.UserCacheDir()/token-terminator-sdk-test.
func TestOfficialSDKs(t *testing.T) {
	needNode(t, "SDK test")
	modules := installSDKs(t)

	prov := newFakeProvider(t)
	g := startGateway(t, corpusSnippet, prov.upstream)
	verifySDKKeys(g)

	// Bodies with one tool output delivered twice (same request).
	out := fixtures.ToolOutput(900, 12000)
	dup := []fixtures.ChatTurn{
		{Tool: "bash", Args: `{"command":"cat big.py"}`, Output: out},
		{Tool: "bash", Args: `{"command":"ls"}`, Output: fixtures.ToolOutput(901, 300)},
		{Tool: "bash", Args: `{"command":"cat big.py"}`, Output: out},
	}
	reqs := map[string]json.RawMessage{
		"chat":      fixtures.ChatBody("gpt-4o", dup, "go on"),
		"responses": fixtures.ResponsesBody("gpt-5", dup, "go on", fixtures.ResponsesOptions{Reasoning: true}),
		"messages":  fixtures.AnthropicBody("claude-sonnet-4-5", dup, "go on", fixtures.AnthropicOptions{System: true, Thinking: true, CacheLast: true}),
	}
	bodies, _ := json.Marshal(reqs)
	work := nodeWork(t, modules, sdkScript, map[string][]byte{"bodies.json": bodies})
	got := runNode(t, work, g.URL, filepath.Join(work, "bodies.json"))
	t.Logf("SDK versions: %s", got["versions"])
	for _, call := range []string{"chat", "chat_stream", "responses", "responses_stream", "messages", "messages_stream"} {
		if want := "compiled:receipts=1"; got[call] != want {
			t.Errorf("%s: SDK got %q, want %q", call, got[call], want)
		}
	}

	// What the provider received: six requests, each with exactly one
	// receipt where the older copy was, the newest copy inline, and the
	// receipt in a tool-result slot.
	seen := prov.all()
	if len(seen) != 6 {
		t.Fatalf("provider got %d requests, want 6", len(seen))
	}
	for _, r := range seen {
		path := r.Path
		if n := bytes.Count(r.Body, []byte(artifact.ReceiptPrefix)); n != 1 {
			t.Errorf("%s: %d receipts in the body the provider got", path, n)
		}
		if !bytes.Contains(r.Body, jsonString(out)) {
			t.Errorf("%s: newest copy not inline", path)
		}
		if r.ContentLength != int64(len(r.Body)) {
			t.Errorf("%s: Content-Length %d for %d bytes", path, r.ContentLength, len(r.Body))
		}
		var auth string
		switch {
		case strings.HasSuffix(path, "/messages"):
			auth = r.Header.Get("Authorization") + r.Header.Get("X-Api-Key")
		default:
			auth = r.Header.Get("Authorization")
		}
		if !strings.Contains(auth, "sk-test") {
			t.Errorf("%s: credential not forwarded", path)
		}
	}
}

// fakeProvider answers like OpenAI and Anthropic would, in JSON or SSE
// depending on the body's "stream", with a text that reports how many
// receipts it received.
type fakeProvider struct {
	*upstream
}

func newFakeProvider(t *testing.T) *fakeProvider {
	u := &upstream{}
	p := &fakeProvider{u}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if answerVerification(w, r) {
			return
		}
		body, err := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, received{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, ContentLength: r.ContentLength})
		u.mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req struct {
			Stream bool   `json:"stream"`
			Model  string `json:"model"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, `{"error":{"message":"invalid JSON"}}`, http.StatusBadRequest)
			return
		}
		text := fmt.Sprintf("compiled:receipts=%d", bytes.Count(body, []byte(artifact.ReceiptPrefix)))
		switch {
		case strings.HasSuffix(r.URL.Path, "/chat/completions"):
			chatReply(w, req.Model, text, req.Stream)
		case strings.HasSuffix(r.URL.Path, "/responses"):
			responsesReply(w, req.Model, text, req.Stream)
		case strings.HasSuffix(r.URL.Path, "/messages"):
			messagesReply(w, req.Model, text, req.Stream)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(u.Close)
	return p
}

// The SDK fakes answer as the loopback fake provider does.
var (
	sse       = fakeprovider.WriteSSE
	jsonReply = fakeprovider.WriteJSON
)

func chatReply(w http.ResponseWriter, model, text string, stream bool) {
	if !stream {
		jsonReply(w, fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`, model, text))
		return
	}
	half := len(text) / 2
	chunk := func(delta, finish string) [2]string {
		return [2]string{"", fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":%q,"choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`, model, delta, finish)}
	}
	sse(w, chunk(fmt.Sprintf(`{"role":"assistant","content":%q}`, text[:half]), "null"),
		chunk(fmt.Sprintf(`{"content":%q}`, text[half:]), "null"),
		chunk(`{}`, `"stop"`), [2]string{"", "[DONE]"})
}

func responsesReply(w http.ResponseWriter, model, text string, stream bool) {
	resp := func(status, out string) string {
		return fmt.Sprintf(`{"id":"resp_1","object":"response","created_at":1,"status":%q,"model":%q,"output":[%s],"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"usage":{"input_tokens":10,"output_tokens":2,"total_tokens":12,"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}}`, status, model, out)
	}
	msg := fmt.Sprintf(`{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":%q,"annotations":[]}]}`, text)
	if !stream {
		jsonReply(w, resp("completed", msg))
		return
	}
	half := len(text) / 2
	delta := func(seq int, d string) [2]string {
		return [2]string{"response.output_text.delta", fmt.Sprintf(`{"type":"response.output_text.delta","sequence_number":%d,"item_id":"msg_1","output_index":0,"content_index":0,"delta":%q}`, seq, d)}
	}
	sse(w,
		[2]string{"response.created", fmt.Sprintf(`{"type":"response.created","sequence_number":0,"response":%s}`, resp("in_progress", ""))},
		delta(1, text[:half]), delta(2, text[half:]),
		[2]string{"response.completed", fmt.Sprintf(`{"type":"response.completed","sequence_number":3,"response":%s}`, resp("completed", msg))})
}

func messagesReply(w http.ResponseWriter, model, text string, stream bool) {
	if !stream {
		jsonReply(w, fmt.Sprintf(`{"id":"msg_1","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":%q}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":2}}`, model, text))
		return
	}
	half := len(text) / 2
	delta := func(d string) [2]string {
		return [2]string{"content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, d)}
	}
	sse(w,
		[2]string{"message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":0}}}`, model)},
		[2]string{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
		delta(text[:half]), delta(text[half:]),
		[2]string{"content_block_stop", `{"type":"content_block_stop","index":0}`},
		[2]string{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}`},
		[2]string{"message_stop", `{"type":"message_stop"}`})
}

// The user's cache directory, taken before TestMain points HOME at a
// temporary directory.
var userCacheDir, userCacheErr = os.UserCacheDir()

// installSDKs returns a node_modules directory holding openai and
// @anthropic-ai/sdk (see npmInstall).
func installSDKs(t *testing.T) string {
	return npmInstall(t, "token-terminator-sdk-test", "openai", "@anthropic-ai/sdk")
}

// sdkScript drives the SDKs: argv[2] is the gateway URL, argv[3] the
// bodies. It prints a JSON object with the text each call got back.
const sdkScript = `
import fs from 'node:fs';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const [gw, file] = process.argv.slice(2);
const bodies = JSON.parse(fs.readFileSync(file, 'utf8'));
const versions = ['openai', '@anthropic-ai/sdk']
  .map((p) => p + '@' + JSON.parse(fs.readFileSync('node_modules/' + p + '/package.json', 'utf8')).version).join(' ');

const openai = new OpenAI({ apiKey: 'sk-test-openai', baseURL: gw + '/v1', maxRetries: 0 });
const anthropic = new Anthropic({ apiKey: 'sk-test-ant', baseURL: gw, maxRetries: 0 });
const out = { versions };

out.chat = (await openai.chat.completions.create(bodies.chat)).choices[0].message.content;
let s = '';
for await (const c of await openai.chat.completions.create({ ...bodies.chat, stream: true })) {
  s += c.choices[0]?.delta?.content ?? '';
}
out.chat_stream = s;

out.responses = (await openai.responses.create(bodies.responses)).output_text;
s = '';
for await (const e of await openai.responses.create({ ...bodies.responses, stream: true })) {
  if (e.type === 'response.output_text.delta') s += e.delta;
}
out.responses_stream = s;

out.messages = (await anthropic.messages.create(bodies.messages)).content[0].text;
const fin = await anthropic.messages.stream(bodies.messages).finalMessage();
out.messages_stream = fin.content[0].text;

process.stdout.write(JSON.stringify(out));
`

// TestOfficialSDKsRecoveryRound drives the same SDK calls through a
// recovery round: the fake provider answers a request carrying a receipt
// with a token_terminator call, and the recovered text after the gateway
// answered it. Every SDK call, plain and streaming, must complete with the
// exact vaulted content in its text and no trace of the tool.
func TestOfficialSDKsRecoveryRound(t *testing.T) {
	needNode(t, "SDK test")
	modules := installSDKs(t)
	prov := newRecoveryProvider(t)
	g := startGateway(t, corpusSnippet, prov.up)
	verifySDKKeys(g)

	out := fixtures.ToolOutput(910, 12000)
	dup := []fixtures.ChatTurn{
		{Tool: "bash", Args: `{"command":"cat big.py"}`, Output: out},
		{Tool: "bash", Args: `{"command":"cat big.py"}`, Output: out},
	}
	reqs := map[string]json.RawMessage{
		"chat":      fixtures.ChatBody("gpt-4o", dup, "go on"),
		"responses": fixtures.ResponsesBody("gpt-5", dup, "go on", fixtures.ResponsesOptions{}),
		"messages":  fixtures.AnthropicBody("claude-sonnet-4-5", dup, "go on", fixtures.AnthropicOptions{}),
	}
	bodies, _ := json.Marshal(reqs)
	work := nodeWork(t, modules, sdkRecoveryScript, map[string][]byte{"bodies.json": bodies})
	got := runNode(t, work, g.URL, filepath.Join(work, "bodies.json"))
	for _, call := range []string{"chat", "chat_stream", "responses", "responses_stream", "messages", "messages_stream"} {
		if !strings.HasSuffix(got[call], "recovered: "+out) || strings.Contains(got[call], "token_terminator") {
			t.Errorf("%s: SDK got %.200q…, want the recovered content", call, got[call])
		}
	}
	if n := prov.up.count(); n != 12 {
		t.Errorf("provider got %d requests, want 12 (six calls, one follow-up each)", n)
	}
	// The Responses API echoes the request's tools in every response
	// object: the SDK gets back the tools it sent (as the provider echoes
	// them: function tools given "strict"), never the gateway's.
	var sent struct{ Tools []map[string]any }
	if err := json.Unmarshal(reqs["responses"], &sent); err != nil || len(sent.Tools) == 0 {
		t.Fatalf("the Responses body sends no tools (%v)", err)
	}
	for _, tool := range sent.Tools {
		if _, ok := tool["strict"]; !ok && tool["type"] == "function" {
			tool["strict"] = false
		}
	}
	for _, call := range []string{"responses", "responses_stream"} {
		var echoed [][]map[string]any
		if err := json.Unmarshal([]byte(got[call+"_tools"]), &echoed); err != nil || len(echoed) == 0 {
			t.Errorf("%s: no tools echoed to the SDK (%q, %v)", call, got[call+"_tools"], err)
			continue
		}
		for _, e := range echoed {
			if !reflect.DeepEqual(e, sent.Tools) {
				t.Errorf("%s: the SDK got tools %v, it sent %v", call, e, sent.Tools)
			}
		}
		if got[call+"_own"] != "false" {
			t.Errorf("%s: the SDK's response names token_terminator", call)
		}
	}
}

// sdkRecoveryScript is sdkScript collecting every text of an answer
// (a stitched stream may carry one text block per round) and failing on
// any tool call reaching the SDK.
const sdkRecoveryScript = `
import fs from 'node:fs';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const [gw, file] = process.argv.slice(2);
const bodies = JSON.parse(fs.readFileSync(file, 'utf8'));
const openai = new OpenAI({ apiKey: 'sk-test-openai', baseURL: gw + '/v1', maxRetries: 0 });
const anthropic = new Anthropic({ apiKey: 'sk-test-ant', baseURL: gw, maxRetries: 0 });
const out = {};
const noTools = (what, v) => { if (v) throw new Error(what + ': a tool call reached the SDK'); };

let r = await openai.chat.completions.create(bodies.chat);
noTools('chat', r.choices[0].message.tool_calls?.length);
out.chat = r.choices[0].message.content;
let s = '';
for await (const c of await openai.chat.completions.create({ ...bodies.chat, stream: true })) {
  noTools('chat_stream', c.choices[0]?.delta?.tool_calls?.length);
  s += c.choices[0]?.delta?.content ?? '';
}
out.chat_stream = s;

r = await openai.responses.create(bodies.responses);
noTools('responses', r.output.some((o) => o.type === 'function_call'));
out.responses = r.output_text;
out.responses_tools = JSON.stringify([r.tools]);
out.responses_own = String(JSON.stringify(r).includes('token_terminator'));
s = '';
const echoed = [];
let own = false;
for await (const e of await openai.responses.create({ ...bodies.responses, stream: true })) {
  noTools('responses_stream', e.type === 'response.output_item.added' && e.item.type === 'function_call');
  if (e.type === 'response.output_text.delta') s += e.delta;
  if (e.response) echoed.push(e.response.tools);
  own = own || JSON.stringify(e).includes('token_terminator');
}
out.responses_stream = s;
out.responses_stream_tools = JSON.stringify(echoed);
out.responses_stream_own = String(own);

const texts = (m) => { noTools('messages', m.content.some((b) => b.type === 'tool_use')); return m.content.filter((b) => b.type === 'text').map((b) => b.text).join(''); };
out.messages = texts(await anthropic.messages.create(bodies.messages));
out.messages_stream = texts(await anthropic.messages.stream(bodies.messages).finalMessage());

process.stdout.write(JSON.stringify(out));
`

// verifySDKKeys has the provider accept the SDK scripts' keys once, as
// their first requests would be.
func verifySDKKeys(g *gateway) {
	g.verify("/v1/chat/completions", "Authorization: Bearer sk-test-openai")
	g.verify("/v1/messages", "Authorization: Bearer sk-test-ant") // what this SDK sends
}
