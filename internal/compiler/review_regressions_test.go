package compiler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// A result the model asked for again (a re-read file) is sent inline even
// though its content was leased: receipting the newest, unanswered copy
// would leave the content nowhere in the request.
func TestLeaseNeverHidesUnansweredResult(t *testing.T) {
	x := fixtures.ToolOutput(900, 10500)
	step1 := fixtures.ChatBody("gpt-4o", []fixtures.ChatTurn{{Tool: "read_file", Output: x}}, "")
	step2 := fixtures.ChatBody("gpt-4o", []fixtures.ChatTurn{{Tool: "read_file", Output: x}, {Tool: "read_file", Output: x}}, "")
	c := newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
	compile(c, "t", step1)
	res := compile(c, "t", step2)
	if res.Receipts != 1 {
		t.Fatalf("receipts %d (%s), want 1 (the older copy)", res.Receipts, res.Reason)
	}
	msgs := messagesOf(t, res.Body)
	if contentString(msgs[len(msgs)-1]) != x {
		t.Fatal("the unanswered result was receipted")
	}
}

// A small turn kept inline must not be separated from a folded neighbour
// that answers its tool call: it folds with it, and the request stays
// valid (it used to fail the checker on every later request).
func TestSmallTurnFoldsWithItsAnsweringNeighbour(t *testing.T) {
	long := strings.Repeat("words and more words ", 40)
	m := []string{`{"role":"user","content":"first question ` + long + `"}`, `{"role":"assistant","content":"answer ` + long + `"}`,
		`{"role":"user","content":"go"}`, `{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"ls","input":{}}]}`,
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"a b c"},{"type":"text","text":"next ` + long + `"}]}`,
		`{"role":"assistant","content":"ok ` + long + `"}`}
	for i := 3; i < 12; i++ {
		m = append(m, fmt.Sprintf(`{"role":"user","content":"q%d %s"}`, i, long), fmt.Sprintf(`{"role":"assistant","content":"a%d %s"}`, i, long))
	}
	body := []byte(`{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[` + strings.Join(m, ",") + `]}`)
	c := newCompiler(t, compactOpts(5, 6), compilertest.NewMemStore(), nil)
	res := c.Compile(t.Context(), compiler.Request{Path: "/v1/messages", Body: body, Mode: compiler.ModeEnforce})
	if res.Decision != compiler.Accepted || res.Folded != 6 || c.InvalidOutputs() != 0 {
		t.Fatalf("%s/%s folded %d invalid %d", res.Decision, res.Reason, res.Folded, c.InvalidOutputs())
	}
	if err := compiler.CheckCompacted("/v1/messages", body, res.Body); err != nil {
		t.Fatal(err)
	}
}

// Claude Code shape: every turn opens with the previous turn's tool result.
// Describing and compacting a long history must stay linear.
func BenchmarkCompactLongMixedHistory(b *testing.B) {
	body := anthropicConversation(2000, true)
	c := newCompiler(b, compactOpts(5, 6), compilertest.NewMemStore(), nil)
	b.SetBytes(int64(len(body)))
	for i := 0; i < b.N; i++ {
		c.Compile(b.Context(), compiler.Request{Path: "/v1/messages", Body: body, Mode: compiler.ModeEnforce})
	}
}

// A user message of 40,000 text parts: describing it must not be quadratic.
func TestDescribeManyParts(t *testing.T) {
	parts := make([]any, 40000)
	for i := range parts {
		parts[i] = map[string]any{"type": "text", "text": "some words of input"}
	}
	msgs := []any{map[string]any{"role": "user", "content": parts}, map[string]any{"role": "assistant", "content": "ok"}}
	for i := 1; i < 12; i++ {
		msgs = append(msgs, map[string]any{"role": "user", "content": "more"}, map[string]any{"role": "assistant", "content": "ok"})
	}
	body, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": msgs})
	// The fold is under test, not the speed: under -race on a loaded
	// machine the linear describe can pass the default compile timeout,
	// which would report timeout instead. The quadratic one it replaced
	// (40,000 parts concatenated one by one) takes far past a minute.
	opts := compactOpts(5, 6)
	opts.Timeout = time.Minute
	c := newCompiler(t, opts, compilertest.NewMemStore(), nil)
	res := compile(c, "t", body)
	if res.Folded != 1 { // only the big turn is larger than its summary
		t.Fatalf("folded %d (%s)", res.Folded, res.Reason)
	}
}

// Pathological bodies pass through with a reason, linearly: one object with
// many keys (duplicate detection), and more values than the parser holds.
func TestPathologicalBodies(t *testing.T) {
	var keys strings.Builder
	keys.WriteString(`{"messages":[],"x":{`)
	for i := 0; i < 60000; i++ {
		if i > 0 {
			keys.WriteByte(',')
		}
		fmt.Fprintf(&keys, `"k%d":1`, i)
	}
	keys.WriteString(`}}`)
	zeros := `{"messages":[],"x":[0` + strings.Repeat(",0", 1<<20) + `]}`
	tests := []struct {
		name, body string
		reason     compiler.Reason
	}{
		{"many keys", keys.String(), compiler.ReasonNoSlots},
		{"many keys duplicate", strings.Replace(keys.String(), `"k59999"`, `"k17"`, 1), compiler.ReasonInvalidJSON},
		{"too many values", zeros, compiler.ReasonTooComplex},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The reason is under test, not the speed: under -race on a
			// loaded machine a million values can take past the default
			// compile timeout (which would report timeout instead).
			c := newCompiler(t, compiler.Options{InlineLeases: 1, Timeout: time.Minute}, compilertest.NewMemStore(), nil)
			if res := compile(c, "t", []byte(tt.body)); res.Reason != tt.reason || res.Decision != compiler.Passthrough {
				t.Fatalf("%s/%s, want pass-through %s", res.Decision, res.Reason, tt.reason)
			}
		})
	}
}

// stubbornStore ignores its context, like a stuck disk.
type stubbornStore struct{ *compilertest.MemStore }

func (s stubbornStore) Ancestor(ctx context.Context, sc artifact.Scope, ch []artifact.Digest) (artifact.Lineage, error) {
	time.Sleep(300 * time.Millisecond)
	return s.MemStore.Ancestor(context.Background(), sc, ch)
}

// The compile timeout holds even when the work under it ignores its
// context: the original goes out, and the abandoned compile records nothing.
func TestTimeoutEnforced(t *testing.T) {
	o := fixtures.ToolOutput(950, 9000)
	body := fixtures.ChatBody("gpt-4o", []fixtures.ChatTurn{{Tool: "bash", Output: o}, {Tool: "bash", Output: o}}, "")
	store := compilertest.NewMemStore()
	c := newCompiler(t, compiler.Options{InlineLeases: 1, Timeout: 20 * time.Millisecond}, stubbornStore{store}, nil)
	stopped := make(chan struct{})
	res := c.Compile(context.Background(), compiler.Request{Path: chatPath, Body: body, Scope: artifact.Scope{Tenant: "t"},
		Mode: compiler.ModeEnforce, Done: func() { close(stopped) }})
	if res.Reason != compiler.ReasonTimeout || &res.Body[0] != &body[0] {
		t.Fatalf("%s/%s: the original was not forwarded at the timeout", res.Decision, res.Reason)
	}
	// Done says when the abandoned compile has really stopped (the gateway
	// holds its memory reservation until then): not yet when Compile gave
	// up on it, once the stuck store returns.
	select {
	case <-stopped:
		t.Fatal("Done was called before the abandoned compile stopped")
	default:
	}
	select {
	case <-stopped:
	case <-time.After(time.Minute):
		t.Fatal("Done was never called for the abandoned compile")
	}
}

// Done is called exactly once, before Compile returns, for a compile that
// finishes in time and for requests that are not compiled at all.
func TestDoneBeforeReturn(t *testing.T) {
	o := fixtures.ToolOutput(951, 9000)
	body := fixtures.ChatBody("gpt-4o", []fixtures.ChatTurn{{Tool: "bash", Output: o}, {Tool: "bash", Output: o}}, "")
	c := newCompiler(t, compiler.Options{InlineLeases: 1, Timeout: time.Minute}, compilertest.NewMemStore(), nil)
	for _, tc := range []struct {
		name, path string
		mode       compiler.Mode
	}{{"compiled", chatPath, compiler.ModeEnforce}, {"not a candidate", "/v1/embeddings", compiler.ModeEnforce}, {"off", chatPath, compiler.ModeOff}} {
		calls := 0
		c.Compile(context.Background(), compiler.Request{Path: tc.path, Body: body, Scope: artifact.Scope{Tenant: "t"}, Mode: tc.mode, Done: func() { calls++ }})
		if calls != 1 {
			t.Errorf("%s: Done called %d times by the time Compile returned, want 1", tc.name, calls)
		}
	}
}

// Responses calls of every kind pair with their outputs by call_id; the
// rules check sees an orphaned computer_call_output.
func TestResponsesAnyCallKindPairs(t *testing.T) {
	ok := []byte(`{"model":"gpt-5","input":[{"role":"user","content":"go"},{"type":"computer_call","call_id":"c1","action":{}},{"type":"computer_call_output","call_id":"c1","output":{}}]}`)
	orphan := []byte(`{"model":"gpt-5","input":[{"role":"user","content":"go"},{"type":"computer_call_output","call_id":"c1","output":{}}]}`)
	if err := compiler.CheckRules("/v1/responses", ok); err != nil {
		t.Fatalf("paired computer call refused: %v", err)
	}
	if err := compiler.CheckRules("/v1/responses", orphan); err == nil {
		t.Fatal("orphaned computer_call_output accepted")
	}
}

func TestChatRules(t *testing.T) {
	tests := []struct {
		name, body string
		ok         bool
	}{
		{"paired", `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a","content":"r"}]}`, true},
		{"user between call and result", `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"user","content":"x"},{"role":"tool","tool_call_id":"a","content":"r"}]}`, false},
		{"orphan result", `{"messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"a","content":"r"}]}`, false},
		{"unanswered call", `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"assistant","content":"done"}]}`, false},
	}
	for _, tt := range tests {
		if err := compiler.CheckRules(chatPath, []byte(tt.body)); (err == nil) != tt.ok {
			t.Errorf("%s: err = %v", tt.name, err)
		}
	}
}

// A fold-heavy request (40 turns: 34 folded, old results vaulted), compiled
// again and again as a conversation's retries are: the cost of compaction
// and of its validity check.
func BenchmarkCompactFolded(b *testing.B) {
	body := anthropicConversation(40, false)
	c := newCompiler(b, compactOpts(5, 6), compilertest.NewMemStore(), nil)
	req := compiler.Request{Path: "/v1/messages", Body: body, Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce}
	if res := c.Compile(b.Context(), req); res.Folded != 34 {
		b.Fatalf("folded %d (%s)", res.Folded, res.Reason)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		c.Compile(b.Context(), req)
	}
}

// A turn larger than max_artifact_chars cannot be vaulted, so it never
// folds; with clean boundaries its neighbours still do.
func TestTooLargeTurnStaysInline(t *testing.T) {
	body := conversation(12, 1000, func(msgs []any) []any {
		msgs[3+4*2].(map[string]any)["content"] = fixtures.ToolOutput(990, 5000) // turn 2's result
		return msgs
	})
	opts := compactOpts(5, 6)
	opts.MinArtifactChars, opts.MaxArtifactChars = 1000, 3000
	c := newCompiler(t, opts, compilertest.NewMemStore(), nil)
	res := compile(c, "t", body)
	if res.Folded != 5 {
		t.Fatalf("folded %d (%s), want 5", res.Folded, res.Reason)
	}
	if err := compiler.CheckCompacted(chatPath, body, res.Body); err != nil {
		t.Fatal(err)
	}
	out := messagesOf(t, res.Body)
	if out[3].Role != "user" || strings.HasPrefix(contentString(out[3]), artifact.FoldPrefix) {
		t.Fatalf("turn 2 folded: %q", contentString(out[3]))
	}
}
