package compiler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

const chatPath = "/v1/chat/completions"

var receiptRE = regexp.MustCompile(`^\[Token Terminator artifact a_[0-9a-f]{32} \| tool=[A-Za-z0-9._:/-]{1,80} \| chars=[0-9]+ \| sha256=[0-9a-f]{16}…\]$`)

func newCompiler(t testing.TB, opts compiler.Options, store artifact.Store, tc compiler.TokenCounter) *compiler.Compiler {
	t.Helper()
	c, err := compiler.New(opts, store, tc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func compile(c *compiler.Compiler, tenant string, body []byte) compiler.Result {
	return c.Compile(context.Background(), compiler.Request{Path: chatPath, Body: body, Scope: artifact.Scope{Tenant: tenant}, Mode: compiler.ModeEnforce})
}

// receipts returns the receipts found in a body.
func receipts(t testing.TB, body []byte) []string {
	t.Helper()
	var out []string
	for _, m := range regexp.MustCompile(`"(\[Token Terminator artifact [^"]*\])"`).FindAllSubmatch(body, -1) {
		r := string(m[1])
		if !receiptRE.MatchString(r) {
			t.Fatalf("malformed receipt %q", r)
		}
		out = append(out, r)
	}
	return out
}

// assertSpliced checks, independently of the compiler's parser, that out is
// orig with some complete JSON values replaced by receipt strings and every
// other byte unchanged.
func assertSpliced(t testing.TB, orig, out []byte) {
	t.Helper()
	if !json.Valid(out) {
		t.Fatalf("output is not valid JSON")
	}
	out = compiler.WithoutReceiptBlocks(out) // a receipt block list stands for the string it holds
	// A receipt is a whole string value, or sits inside a string between
	// the client's wrapper parts (then the oracle, CheckRewrite, checks
	// that exactly the body was replaced).
	loc := regexp.MustCompile(`"?\[Token Terminator artifact a_[0-9a-f]{32} \| [^"]*?…(?: \| same_as=[^"\]]*)?\]"?`).FindAllIndex(out, -1)
	pos, prev := 0, 0
	for i, l := range loc {
		seg := out[prev:l[0]]
		inner := out[l[0]] != '"' || out[l[1]-1] != '"'
		switch {
		case i == 0 && !bytes.HasPrefix(orig, seg):
			t.Fatalf("prefix before first receipt changed")
		case i > 0 && !bytes.HasPrefix(orig[pos:], seg):
			t.Fatalf("bytes between receipts changed at output offset %d", prev)
		}
		pos += len(seg)
		prev = l[1]
		if inner {
			// The body ends where the bytes after the receipt resume.
			next := len(out)
			if i+1 < len(loc) {
				next = loc[i+1][0]
			}
			k := bytes.Index(orig[pos:], out[prev:next])
			if k < 0 {
				t.Fatalf("bytes after the receipt at %d changed", l[0])
			}
			pos += k
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(orig[pos:]))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("receipt at %d does not replace a whole JSON value: %v", l[0], err)
		}
		pos += int(dec.InputOffset())
	}
	if !bytes.Equal(orig[pos:], out[prev:]) {
		t.Fatalf("bytes after the last receipt changed")
	}
}

func TestReceiptFormat(t *testing.T) {
	var d artifact.Digest
	for i := range d {
		d[i] = byte(i * 7)
	}
	tests := []struct{ tool, want string }{
		{"bash", "bash"},
		{"str replace editor", "str_replace_editor"},
		{"mcp__serena__find_symbol", "mcp__serena__find_symbol"},
		{"weird<>\"name\n", "weirdname_"},
		{"", "tool"},
		{"日本", "tool"},
		{strings.Repeat("x", 200), strings.Repeat("x", 80)},
	}
	for _, tt := range tests {
		r := artifact.Receipt(d, tt.tool, 12345)
		if !receiptRE.MatchString(r) || len(r) >= 300 {
			t.Errorf("Receipt(%q) = %q: malformed", tt.tool, r)
		}
		if !strings.Contains(r, " | tool="+tt.want+" | ") {
			t.Errorf("Receipt(%q) = %q, want tool=%s", tt.tool, r, tt.want)
		}
		if r != artifact.Receipt(d, tt.tool, 12345) {
			t.Errorf("receipt not stable")
		}
	}
	if got := artifact.ID(d); !strings.HasPrefix(artifact.Receipt(d, "x", 1), artifact.ReceiptPrefix+got[2:]) {
		t.Errorf("receipt does not name %s", got)
	}
}

func TestSameRequestDuplicates(t *testing.T) {
	out := fixtures.ToolOutput(1, 9000)
	turns := []fixtures.ChatTurn{
		{Tool: "bash", Args: `{"command":"cat a.py"}`, Output: out},
		{Tool: "str_replace_editor", Args: `{"command":"view"}`, Output: fixtures.ToolOutput(2, 9000)},
		{Tool: "bash", Args: `{"command":"cat a.py"}`, Output: out},
	}
	body := fixtures.ChatBody("gpt-4o", turns, "")
	store := compilertest.NewMemStore()
	c := newCompiler(t, compiler.Options{}, store, nil)
	res := compile(c, "t1", body)
	if res.Decision != compiler.Accepted || res.Receipts != 1 {
		t.Fatalf("decision %s/%s receipts %d, want accepted with 1", res.Decision, res.Reason, res.Receipts)
	}
	assertSpliced(t, body, res.Body)
	if res.SentBytes != len(res.Body) || res.SentBytes >= res.RawBytes {
		t.Fatalf("sizes: raw %d sent %d len %d", res.RawBytes, res.SentBytes, len(res.Body))
	}
	// The older copy is the receipt; the newest stays inline.
	var msgs struct{ Messages []struct{ Content any } }
	if err := json.Unmarshal(res.Body, &msgs); err != nil {
		t.Fatal(err)
	}
	if s, _ := msgs.Messages[3].Content.(string); !strings.HasPrefix(s, artifact.ReceiptPrefix) {
		t.Fatalf("older copy not receipted: %.60q", s)
	}
	if s, _ := msgs.Messages[7].Content.(string); s != out {
		t.Fatalf("newest copy changed")
	}
	// Recoverable exactly, with private provenance kept.
	if store.Len() != 1 {
		t.Fatalf("stored %d artifacts, want 1", store.Len())
	}
	r := receipts(t, res.Body)[0]
	d := strDigest(out)
	a, ok, _ := store.Get(t.Context(), "t1", d)
	if !ok || a.Text != out || a.Tool != "bash" || a.Args != `{"command":"cat a.py"}` || a.Chars != len([]rune(out)) {
		t.Fatalf("artifact not stored exactly: ok=%v tool=%q", ok, a.Tool)
	}
	var raw string
	if err := json.Unmarshal(a.Raw, &raw); err != nil || raw != out {
		t.Fatalf("raw value not the original JSON string")
	}
	if !strings.Contains(r, "tool=bash") || !strings.Contains(r, fmt.Sprintf("chars=%d", a.Chars)) {
		t.Fatalf("receipt %q", r)
	}
}

func TestLeasesAcrossRequests(t *testing.T) {
	turns := fixtures.Turns(10, 3, 9000)
	step1 := fixtures.ChatBody("gpt-4o", turns[:1], "")
	step2 := fixtures.ChatBody("gpt-4o", turns[:2], "")
	step3 := fixtures.ChatBody("gpt-4o", turns[:3], "")

	tests := []struct {
		name   string
		leases int
		want   []int // receipts per step
	}{
		{"one lease", 1, []int{0, 1, 2}},
		{"two leases", 2, []int{0, 0, 1}},
		{"leases off", 0, []int{0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCompiler(t, compiler.Options{InlineLeases: tt.leases}, compilertest.NewMemStore(), nil)
			for i, body := range [][]byte{step1, step2, step3} {
				res := compile(c, "t", body)
				if res.Receipts != tt.want[i] {
					t.Fatalf("step %d: %d receipts (%s %s), want %d", i+1, res.Receipts, res.Decision, res.Reason, tt.want[i])
				}
				if res.Receipts == 0 && !bytes.Equal(res.Body, body) {
					t.Fatalf("step %d: pass-through changed bytes", i+1)
				}
				if res.Receipts > 0 {
					assertSpliced(t, body, res.Body)
					// A retry compiles to identical bytes.
					if again := compile(c, "t", body); !bytes.Equal(again.Body, res.Body) {
						t.Fatalf("step %d: retry compiled differently", i+1)
					}
				}
			}
		})
	}
}

func TestIsolation(t *testing.T) {
	turns := fixtures.Turns(20, 2, 9000)
	step1 := fixtures.ChatBody("gpt-4o", turns[:1], "")
	step2 := fixtures.ChatBody("gpt-4o", turns[:2], "")
	// Another conversation (different task) delivering the same output.
	other := fixtures.ChatBody("gpt-4o", turns[:2], "")
	other = bytes.Replace(other, []byte("Fix the failing test."), []byte("Write the docs please"), 1)

	c := newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
	compile(c, "tenantA", step1)
	if res := compile(c, "tenantB", step2); res.Receipts != 0 {
		t.Fatalf("tenant B consumed tenant A's lease")
	}
	if res := compile(c, "tenantA", other); res.Receipts != 0 {
		t.Fatalf("another conversation consumed the lease")
	}
	if res := compile(c, "tenantA", step2); res.Receipts != 1 {
		t.Fatalf("own conversation: %d receipts, want 1", res.Receipts)
	}
	// Sessions split one tenant's conversations.
	sc := func(session string, body []byte) compiler.Result {
		return c.Compile(context.Background(), compiler.Request{Path: chatPath, Body: body,
			Scope: artifact.Scope{Tenant: "tenantC", Session: session}, Mode: compiler.ModeEnforce})
	}
	sc("s1", step1)
	if res := sc("s2", step2); res.Receipts != 0 {
		t.Fatalf("session s2 consumed session s1's lease")
	}
}

func TestCacheControlBlindLineage(t *testing.T) {
	turns := fixtures.Turns(30, 2, 9000)
	step1 := fixtures.ChatBody("gpt-4o", turns[:1], "")
	step2 := fixtures.ChatBody("gpt-4o", turns[:2], "")
	// The client moved a cache_control marker and reformatted the JSON.
	var v map[string]any
	if err := json.Unmarshal(step1, &v); err != nil {
		t.Fatal(err)
	}
	v["messages"].([]any)[1].(map[string]any)["cache_control"] = map[string]any{"type": "ephemeral"}
	moved, _ := json.MarshalIndent(v, "", "  ")

	c := newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
	compile(c, "t", moved)
	if res := compile(c, "t", step2); res.Receipts != 1 {
		t.Fatalf("lineage lost across cache_control/whitespace change: %d receipts", res.Receipts)
	}
}

func TestPassThroughIsOriginalBytes(t *testing.T) {
	big := strings.Repeat("x", 9000)
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	tests := []struct {
		name, body string
		reason     compiler.Reason
	}{
		{"empty", "", "invalid_json"},
		{"not json", "hello", "invalid_json"},
		{"truncated", `{"messages":[{"role":"tool","content":"` + big, "invalid_json"},
		{"array", `[1,2]`, "unknown_shape"},
		{"string", `"x"`, "unknown_shape"},
		{"messages not list", `{"messages":{"a":1}}`, "unknown_shape"},
		{"message not object", `{"messages":[1]}`, "unknown_shape"},
		{"invalid utf8", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", "invalid_json"},
		{"duplicate keys", `{"messages":[],"messages":[]}`, "invalid_json"},
		{"deep", deep, "too_deep"},
		{"odd tool content", `{"messages":[{"role":"tool","tool_call_id":"x","content":{"a":1}},{"role":"tool","tool_call_id":"y","content":7},{"role":"tool","content":null}]}`, "no_candidates"},
		{"unknown call id", `{"messages":[{"role":"tool","tool_call_id":"nope","content":"` + big + `"}]}`, "nothing_to_replace"},
		{"no messages", `{"messages":[]}`, "no_candidates"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCompiler(t, compiler.Options{}, compilertest.NewMemStore(), nil)
			body := []byte(tt.body)
			res := compile(c, "t", body)
			if res.Decision != compiler.Passthrough || res.Reason != tt.reason {
				t.Fatalf("got %s/%s, want passthrough/%s", res.Decision, res.Reason, tt.reason)
			}
			if !bytes.Equal(res.Body, body) || (len(body) > 0 && &res.Body[0] != &body[0]) {
				t.Fatalf("pass-through is not the original slice")
			}
		})
	}
}

func TestBytePreservation(t *testing.T) {
	// Odd spacing, escapes, unknown fields, number spellings and key order.
	out := fixtures.ToolOutput(40, 8500)
	enc, _ := json.Marshal(out)
	body := []byte(`{ "messages" : [` +
		"\n {\"content\":\"sys \\u00e9\\/\",\"role\":\"system\",\"x-extra\":1.50E+2},\n" +
		` {"role":"assistant","content":"","tool_calls":[{"id":"functions.bash:0","type":"function","function":{"name":"bash","arguments":"{\"c\":1}"}}]},` +
		` {"role" : "tool", "tool_call_id":"functions.bash:0", "content":` + string(enc) + `},` +
		` {"role":"assistant","content":null,"tool_calls":[{"id":"functions.bash:0","type":"function","function":{"name":"bash","arguments":"{}"}}]},` +
		` {"tool_call_id":"functions.bash:0","role":"tool","content":` + string(enc) + `}` +
		"\n], \"model\":\"kimi-k2\", \"temperature\": 0.0, \"unknown\": {\"deep\": [true, false, null]} }")
	c := newCompiler(t, compiler.Options{}, compilertest.NewMemStore(), nil)
	res := compile(c, "t", body)
	if res.Decision != compiler.Accepted || res.Receipts != 1 {
		t.Fatalf("got %s/%s receipts=%d", res.Decision, res.Reason, res.Receipts)
	}
	assertSpliced(t, body, res.Body)
}

func TestTextPartsAndLegacyFunction(t *testing.T) {
	out := fixtures.ToolOutput(50, 9000)
	enc, _ := json.Marshal(out)
	body := []byte(`{"messages":[{"role":"assistant","content":null,"function_call":{"name":"search","arguments":"{}"}},` +
		`{"role":"function","name":"search","content":` + string(enc) + `},` +
		`{"role":"tool","tool_call_id":"z","content":` + string(enc) + `},` +
		`{"role":"tool","tool_call_id":"y","content":[{"type":"text","text":` + string(enc) + `}]},` +
		`{"role":"tool","tool_call_id":"w","content":[{"type":"text","text":` + string(enc) + `}]}]}`)
	store := compilertest.NewMemStore()
	c := newCompiler(t, compiler.Options{}, store, nil)
	res := compile(c, "t", body)
	// The string copies are one artifact and the text-parts copies another:
	// each older copy is a receipt that restores its own bytes.
	if res.Receipts != 2 || !strings.Contains(string(res.Body), "tool=search") || store.Len() != 2 {
		t.Fatalf("legacy function result not receipted: %s/%s", res.Decision, res.Reason)
	}
	assertSpliced(t, body, res.Body)
}

type fakeTokens struct{ perByte float64 }

func (f fakeTokens) Count(_ context.Context, _ string, body []byte) artifact.TokenCount {
	// Receipts are "expensive": count receipt bytes 100x.
	n := len(body) + 100*bytes.Count(body, []byte(artifact.ReceiptPrefix))*int(f.perByte)
	return artifact.TokenCount{N: n, Encoding: "fake", Exact: true, Status: "exact"}
}

func TestGate(t *testing.T) {
	dup := func(n int) []byte {
		o := fixtures.ToolOutput(60, n)
		return fixtures.ChatBody("gpt-4o", []fixtures.ChatTurn{{Tool: "bash", Output: o}, {Tool: "bash", Output: o}}, "")
	}
	tests := []struct {
		name   string
		body   []byte
		opts   compiler.Options
		tokens compiler.TokenCounter
		want   compiler.Reason
		// stores: the artifacts may be written. The byte check comes
		// before the write; the token count runs beside it, so a rewrite
		// it refuses may leave its (unnamed) artifacts stored.
		stores bool
	}{
		{"smaller", dup(9000), compiler.Options{}, nil, "", true},
		{"receipt not smaller", dup(20), compiler.Options{MinArtifactChars: 10}, nil, "not_smaller", false},
		{"fewer bytes more tokens", dup(9000), compiler.Options{}, fakeTokens{perByte: 1000}, "not_fewer_tokens", true},
		{"fewer bytes fewer tokens", dup(9000), compiler.Options{}, fakeTokens{perByte: 0}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := compilertest.NewMemStore()
			c := newCompiler(t, tt.opts, store, tt.tokens)
			res := compile(c, "t", tt.body)
			if res.Reason != tt.want {
				t.Fatalf("reason %q, want %q", res.Reason, tt.want)
			}
			if tt.want != "" {
				if !bytes.Equal(res.Body, tt.body) || (!tt.stores && store.Persisted != 0) {
					t.Fatalf("vetoed rewrite leaked: persisted %d", store.Persisted)
				}
				if res.Receipts != 0 || res.Decision != compiler.Passthrough {
					t.Fatalf("vetoed rewrite reported %s with %d receipts", res.Decision, res.Receipts)
				}
			}
		})
	}
}

// Leases follow what was forwarded: a vault failure forwards the original,
// which counts as an inline exposure; nothing that was not sent is recorded.
func TestVaultFailureFailsOpen(t *testing.T) {
	turns := fixtures.Turns(70, 3, 9000)
	store := compilertest.NewMemStore()
	c := newCompiler(t, compiler.Options{InlineLeases: 2}, store, nil)
	compile(c, "t", fixtures.ChatBody("gpt-4o", turns[:1], ""))
	store.Fail = errors.New("disk on fire")
	body := fixtures.ChatBody("gpt-4o", turns[:2], "")
	res := compile(c, "t", body)
	if res.Reason != "vault_error" || !bytes.Equal(res.Body, body) || !strings.Contains(res.Detail, "disk on fire") {
		t.Fatalf("got %s/%s (%q)", res.Decision, res.Reason, res.Detail)
	}
	store.Fail = nil
	compile(c, "t", body) // recorded now: turn 0 has 2 exposures
	res = compile(c, "t", fixtures.ChatBody("gpt-4o", turns[:3], ""))
	if res.Receipts != 1 {
		t.Fatalf("%d receipts after two inline exposures, want 1", res.Receipts)
	}
	full := compilertest.NewMemStore()
	full.Fail = fmt.Errorf("wrapped: %w", artifact.ErrFull)
	c = newCompiler(t, compiler.Options{}, full, nil)
	if res := compile(c, "t", body); res.Reason != "vault_error" && res.Reason != "vault_full" {
		t.Fatalf("reason %q", res.Reason)
	}
}

type slowStore struct{ *compilertest.MemStore }

func (s slowStore) Persist(ctx context.Context, _ artifact.Scope, _ []artifact.Artifact) error {
	<-ctx.Done()
	return ctx.Err()
}

type panicStore struct{ *compilertest.MemStore }

func (panicStore) Ancestor(context.Context, artifact.Scope, []artifact.Digest) (artifact.Lineage, error) {
	panic("boom")
}

func TestTimeoutAndPanicFailOpen(t *testing.T) {
	o := fixtures.ToolOutput(80, 9000)
	body := fixtures.ChatBody("gpt-4o", []fixtures.ChatTurn{{Tool: "bash", Output: o}, {Tool: "bash", Output: o}}, "")
	c := newCompiler(t, compiler.Options{Timeout: 20 * time.Millisecond}, slowStore{compilertest.NewMemStore()}, nil)
	if res := compile(c, "t", body); res.Reason != "timeout" || !bytes.Equal(res.Body, body) {
		t.Fatalf("timeout: got %s/%s", res.Decision, res.Reason)
	}
	c = newCompiler(t, compiler.Options{}, panicStore{compilertest.NewMemStore()}, nil)
	if res := compile(c, "t", body); res.Reason != "panic" || !bytes.Equal(res.Body, body) {
		t.Fatalf("panic: got %s/%s", res.Decision, res.Reason)
	}
}

func TestShadowAndOff(t *testing.T) {
	o := fixtures.ToolOutput(90, 9000)
	body := fixtures.ChatBody("gpt-4o", []fixtures.ChatTurn{{Tool: "bash", Output: o}, {Tool: "bash", Output: o}}, "")
	store := compilertest.NewMemStore()
	c := newCompiler(t, compiler.Options{}, store, nil)
	res := c.Compile(context.Background(), compiler.Request{Path: chatPath, Body: body, Mode: compiler.ModeShadow})
	if res.Decision != compiler.Shadow || res.Receipts != 1 || !bytes.Equal(res.Body, body) || store.Persisted != 0 ||
		res.SentBytes >= res.RawBytes { // shadow reports what enforce would send
		t.Fatalf("shadow: %s/%s receipts=%d persisted=%d", res.Decision, res.Reason, res.Receipts, store.Persisted)
	}
	res = c.Compile(context.Background(), compiler.Request{Path: chatPath, Body: body, Mode: compiler.ModeOff})
	if res.Reason != "off" || !bytes.Equal(res.Body, body) {
		t.Fatalf("off: %s/%s", res.Decision, res.Reason)
	}
}

func TestDeterministic(t *testing.T) {
	turns := fixtures.Turns(100, 6, 9000)
	turns = append(turns, turns[1], turns[3])
	body := fixtures.ChatBody("gpt-4o", turns, "go on")
	a := compile(newCompiler(t, compiler.Options{}, compilertest.NewMemStore(), nil), "t", body)
	b := compile(newCompiler(t, compiler.Options{}, compilertest.NewMemStore(), nil), "t", body)
	if a.Receipts != 2 || !bytes.Equal(a.Body, b.Body) {
		t.Fatalf("not deterministic or wrong receipts: %d", a.Receipts)
	}
}

func TestFormatFor(t *testing.T) {
	tests := []struct {
		method, path string
		ok           bool
	}{
		{"POST", "/v1/chat/completions", true},
		{"POST", "/openai/v1/chat/completions/", true},
		{"GET", "/v1/chat/completions", false},
		{"POST", "/v1/embeddings", false},
		{"POST", "/v1/chat/completions/extra", false},
		{"POST", "/v1/messages", true},
		{"POST", "/v1/threads/thread_1/messages", false}, // Assistants, not a conversation body
		{"POST", "/v1/responses", true},
	}
	for _, tt := range tests {
		if _, ok := compiler.FormatFor(tt.method, tt.path); ok != tt.ok {
			t.Errorf("FormatFor(%s %s) = %v", tt.method, tt.path, ok)
		}
	}
}

// heldTokens counts bytes as tokens and records, per count, whether the
// body was the request's own and what its hold did.
type heldTokens struct {
	mu    sync.Mutex
	orig  []byte
	calls []heldCall
}

type heldCall struct {
	original, hasHold, held bool
}

func rank(c heldCall) int {
	if c.original {
		return 0
	}
	return 1
}

func (h *heldTokens) Count(ctx context.Context, model string, body []byte) artifact.TokenCount {
	return h.CountHeld(ctx, model, body, nil, nil)
}

func (h *heldTokens) CountHinted(ctx context.Context, model string, body []byte, hints []int) artifact.TokenCount {
	return h.CountHeld(ctx, model, body, hints, nil)
}

func (h *heldTokens) CountHeld(_ context.Context, _ string, body []byte, _ []int, hold artifact.Hold) artifact.TokenCount {
	call := heldCall{original: bytes.Equal(body, h.orig), hasHold: hold != nil}
	if hold != nil {
		release, ok := hold()
		call.held = ok
		if ok {
			release()
		}
	}
	h.mu.Lock()
	h.calls = append(h.calls, call)
	h.mu.Unlock()
	return artifact.TokenCount{N: len(body), Encoding: "fake", Exact: true, Status: artifact.TokensExact}
}

// TestGateHandsTheCounterHolds: the gate counts the original under the
// request's own hold (the gateway's body buffer) and the rewrite under a
// hold that always holds (the compile's own bytes); a request without a
// hold gives the original none, so the counter copies what it keeps.
func TestGateHandsTheCounterHolds(t *testing.T) {
	o := fixtures.ToolOutput(60, 9000)
	body := fixtures.ChatBody("gpt-4o", []fixtures.ChatTurn{{Tool: "bash", Output: o}, {Tool: "bash", Output: o}}, "")
	for _, withHold := range []bool{true, false} {
		tc := &heldTokens{orig: body}
		c := newCompiler(t, compiler.Options{}, compilertest.NewMemStore(), tc)
		var holds atomic.Int32
		req := compiler.Request{Path: chatPath, Body: body, Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce}
		if withHold {
			req.Hold = func() (func(), bool) { holds.Add(1); return func() {}, true }
		}
		if res := c.Compile(context.Background(), req); res.Decision != compiler.Accepted {
			t.Fatalf("hold=%v: %s/%s", withHold, res.Decision, res.Reason)
		}
		want := []heldCall{{original: true, hasHold: withHold, held: withHold}, {original: false, hasHold: true, held: true}}
		// The two counts run at once: the original's first.
		slices.SortFunc(tc.calls, func(a, b heldCall) int { return rank(a) - rank(b) })
		if !slices.Equal(tc.calls, want) {
			t.Fatalf("hold=%v: counts %+v, want %+v", withHold, tc.calls, want)
		}
		if w := map[bool]int32{true: 1, false: 0}[withHold]; holds.Load() != w {
			t.Fatalf("hold=%v: the request's hold was taken %d times, want %d", withHold, holds.Load(), w)
		}
	}
}
