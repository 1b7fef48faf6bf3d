package compiler_test

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
)

const (
	toolHint = "token_terminator artifact_get"
	apiHint  = "GET /token-terminator/artifacts/{id}"
)

func recoveryOptions() compiler.Options {
	return compiler.Options{InlineLeases: 1, Recovery: compiler.Recovery{
		Hint: toolHint, ToolName: recovery.ToolName, ConflictHint: apiHint,
		Tools: compiler.ToolDefinitions{
			Chat:      string(recovery.Definition(provider.Chat)),
			Responses: string(recovery.Definition(provider.Responses)),
			Anthropic: string(recovery.Definition(provider.Anthropic)),
			Gemini:    string(recovery.Definition(provider.Gemini)),
		},
	}}
}

// recoveryFormats renders steps of one conversation per format; tools is
// the client's own tools array ("" for none).
var recoveryFormats = []struct {
	name   string
	format provider.Format
	path   string
	body   func(turns []fixtures.ChatTurn, tools string) []byte
}{
	{"chat", provider.Chat, chatPath, func(ts []fixtures.ChatTurn, tools string) []byte {
		return withTools(fixtures.ChatBody("gpt-4o", ts, ""), tools)
	}},
	{"responses", provider.Responses, responsesPath, func(ts []fixtures.ChatTurn, tools string) []byte {
		return withTools(fixtures.ResponsesBody("gpt-4o", ts, "", fixtures.ResponsesOptions{}), tools)
	}},
	{"anthropic", provider.Anthropic, messagesPath, func(ts []fixtures.ChatTurn, tools string) []byte {
		return withTools(fixtures.AnthropicBody("claude-sonnet-4-5", ts, "", fixtures.AnthropicOptions{}), tools)
	}},
}

// withTools sets the body's tools member (replacing one the generator
// wrote, else added at the start of the object).
func withTools(body []byte, tools string) []byte {
	if tools == "" {
		return body
	}
	root, err := jsonv.Parse(body, jsonv.MaxDepth)
	if err != nil {
		panic(err)
	}
	if n := root.Get("tools"); n != nil {
		return append(append(append([]byte{}, body[:n.Start]...), tools...), body[n.End:]...)
	}
	return append([]byte(`{"tools":`+tools+`,`), body[1:]...)
}

// allReceipts returns every receipt string in a body, whatever its tail.
func allReceipts(body []byte) []string {
	var out []string
	for _, m := range regexp.MustCompile(`"(\[Token Terminator artifact [^"]*\])"`).FindAllSubmatch(body, -1) {
		out = append(out, string(m[1]))
	}
	return out
}

func toolsRaw(t *testing.T, body []byte) []byte {
	t.Helper()
	root, err := jsonv.Parse(body, jsonv.MaxDepth)
	if err != nil {
		t.Fatal(err)
	}
	if n := root.Get("tools"); n != nil {
		return n.Raw(body)
	}
	return nil
}

func clientTool(format provider.Format, name string) string {
	switch format {
	case provider.Chat:
		return `[{"type":"function","function":{"name":"` + name + `","parameters":{"type":"object"}}}]`
	case provider.Responses:
		return `[{"type":"function","name":"` + name + `","parameters":{"type":"object"}}]`
	}
	return `[{"name":"` + name + `","input_schema":{"type":"object"}}]`
}

// A rewrite that carries receipts carries the tool, after the client's
// tools, and receipts name it; later steps carry the identical tools bytes
// (sticky); a client tool of the same name gets no tool; without the option
// nothing changes.
func TestRecoveryToolEdit(t *testing.T) {
	turns := fixtures.Turns(70, 4, 9000)
	for _, f := range recoveryFormats {
		for _, own := range []string{"", "bash", recovery.ToolName} {
			t.Run(f.name+"/client_tool="+own, func(t *testing.T) {
				tools := ""
				if own != "" {
					tools = clientTool(f.format, own)
				}
				c := newCompiler(t, recoveryOptions(), compilertest.NewMemStore(), nil)
				var first []byte
				for step := 1; step <= 4; step++ {
					body := f.body(turns[:step], tools)
					res := c.Compile(context.Background(), compiler.Request{Path: f.path, Body: body,
						Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce, DeferCommit: true})
					if res.Commit == nil {
						t.Fatalf("step %d: no commit (%s)", step, res.Reason)
					}
					res.Commit()
					if step == 1 {
						if res.RecoveryTool || bytes.Contains(res.Body, []byte(`"token_terminator"`)) && own != recovery.ToolName {
							t.Fatalf("step 1 (nothing receipted) carries the tool")
						}
						continue
					}
					if res.Decision != compiler.Accepted || res.Receipts == 0 {
						t.Fatalf("step %d: %s %s, %d receipts", step, res.Decision, res.Reason, res.Receipts)
					}
					assertValidRewrite(t, f.path, body, withoutTool(t, f.format, res))
					if err := compiler.CheckRewrite(f.path, body, res.Body); err != nil {
						t.Fatalf("step %d: the oracle refuses the rewrite with the tool: %v", step, err)
					}
					got := toolsRaw(t, res.Body)
					if own == recovery.ToolName {
						if res.RecoveryTool || !res.ToolConflict || !bytes.Equal(got, toolsRaw(t, body)) {
							t.Fatalf("step %d: conflict not honoured: tool=%v conflict=%v tools=%s", step, res.RecoveryTool, res.ToolConflict, got)
						}
						// Receipts name the API, never the client's tool of our name.
						for _, r := range allReceipts(res.Body) {
							if !strings.HasSuffix(r, " | recover: "+apiHint+"]") {
								t.Fatalf("step %d: receipt of a conflicting request: %s", step, r)
							}
						}
						continue
					}
					def := recovery.Definition(f.format)
					if !res.RecoveryTool || !bytes.HasSuffix(got, append(append([]byte{}, def...), ']')) {
						t.Fatalf("step %d: tools %q do not end in the definition (tool=%v)", step, got, res.RecoveryTool)
					}
					if own != "" && !bytes.HasPrefix(got, []byte(tools[:len(tools)-1])) {
						t.Fatalf("step %d: the client's tools are not first: %s", step, got)
					}
					rs := allReceipts(res.Body)
					if len(rs) == 0 {
						t.Fatal("no receipt found")
					}
					for _, r := range rs {
						if !strings.HasSuffix(r, " | recover: "+toolHint+"]") {
							t.Fatalf("receipt without the hint: %s", r)
						}
					}
					if first == nil {
						first = got
					} else if !bytes.Equal(first, got) {
						t.Fatalf("step %d: tools array changed:\n%s\n%s", step, first, got)
					}
				}
			})
		}
	}
}

// withoutTool returns res with the tool's definition and the receipts'
// hints removed from its body, so the ordinary rewrite oracle applies to
// the rest.
func withoutTool(t *testing.T, format provider.Format, res compiler.Result) compiler.Result {
	t.Helper()
	b := bytes.ReplaceAll(res.Body, []byte(" | recover: "+toolHint+"]"), []byte("]"))
	b = bytes.ReplaceAll(b, []byte(" | recover: "+apiHint+"]"), []byte("]"))
	res.Body, res.SentBytes = b, len(b)
	if !res.RecoveryTool {
		return res
	}
	def := recovery.Definition(format)
	switch {
	case bytes.Contains(b, append([]byte(`,"tools":[`), append(def, ']')...)):
		b = bytes.Replace(b, append([]byte(`,"tools":[`), append(def, ']')...), nil, 1)
	case bytes.Contains(b, append([]byte{','}, def...)):
		b = bytes.Replace(b, append([]byte{','}, def...), nil, 1)
	default:
		t.Fatalf("definition not found in the body")
	}
	res.Body = b
	res.SentBytes = len(b)
	return res
}

// An artifact the model recovered goes inline again in the next request
// of the conversation instead of as a receipt.
func TestRecoveredArtifactReinlined(t *testing.T) {
	turns := fixtures.Turns(80, 3, 9000)
	for _, recovered := range []bool{false, true} {
		c := newCompiler(t, recoveryOptions(), compilertest.NewMemStore(), nil)
		run := func(step int) compiler.Result {
			res := c.Compile(context.Background(), compiler.Request{Path: chatPath, Body: fixtures.ChatBody("gpt-4o", turns[:step], ""),
				Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce, DeferCommit: true})
			return res
		}
		run(1).Commit()
		r2 := run(2)
		if r2.Receipts != 1 {
			t.Fatalf("step 2: %d receipts (%s)", r2.Receipts, r2.Reason)
		}
		if recovered {
			r2.Recovered(digestOf(turns[0].Output))
		}
		r2.Commit()
		r3 := run(3)
		first := digestOf(turns[0].Output)
		inline := !bytes.Contains(r3.Body, []byte(artifact.ID(first)))
		if inline != recovered {
			t.Fatalf("recovered=%v: step 3 carries the first result inline: %v (%d receipts, %s)", recovered, inline, r3.Receipts, r3.Reason)
		}
	}
}

// digestOf is the artifact identity of a tool result sent as a JSON string.
func digestOf(s string) artifact.Digest { return strDigest(s) }

// Folded-turn summaries end in the recovery hint of the configuration, as
// receipts do (tool: the tool's action; api: the API path; none: nothing),
// every summary already sent is sent again byte for byte, and without the
// hint (WithoutRecovery) the rewrite passes the compaction oracle.
func TestFoldSummaryRecoverHint(t *testing.T) {
	tests := []struct {
		name string
		rec  compiler.Recovery
	}{
		{"tool", recoveryOptions().Recovery},
		{"api", compiler.Recovery{Hint: "GET /token-terminator/artifacts/{id}"}},
		{"none", compiler.Recovery{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := compactOpts(5, 6)
			opts.Recovery = tt.rec
			c := newCompiler(t, opts, compilertest.NewMemStore(), nil)
			var sent []string // summaries sent so far, as JSON strings
			for n := 1; n <= 22; n++ {
				body := conversation(n, 5000, nil)
				res := compile(c, "t", body)
				if res.Decision != compiler.Accepted {
					continue
				}
				if err := compiler.CheckCompacted(chatPath, body, res.Body); err != nil {
					t.Fatalf("step %d: %v", n, err)
				}
				if bytes.Contains(compiler.WithoutRecovery(body, res.Body), []byte(" | recover: ")) {
					t.Fatalf("step %d: WithoutRecovery left a hint", n)
				}
				for _, s := range sent {
					if !bytes.Contains(res.Body, []byte(s)) {
						t.Fatalf("step %d: summary sent before is gone or changed: %s", n, s)
					}
				}
				sent = sent[:0]
				for _, m := range messagesOf(t, res.Body) {
					s := contentString(m)
					if !strings.HasPrefix(s, artifact.FoldPrefix) {
						continue
					}
					want := `"]`
					if tt.rec.Hint != "" {
						want = `" | recover: ` + tt.rec.Hint + "]"
					}
					if !strings.HasSuffix(s, want) || strings.Count(s, " | recover: ") != min(1, len(tt.rec.Hint)) {
						t.Fatalf("step %d: summary %q does not end in %q", n, s, want)
					}
					sent = append(sent, string(m.Content))
				}
			}
			if len(sent) == 0 {
				t.Fatal("no turn folded")
			}
		})
	}
}

// cachedFormats renders steps as recoveryFormats does, for models whose
// cache reads cost 0.1 of the input price (gpt-5; Claude with a
// cache_control breakpoint), where re-writing a cached prefix is dear.
var cachedFormats = []struct {
	name   string
	format provider.Format
	path   string
	body   func(turns []fixtures.ChatTurn, tools string) []byte
}{
	{"chat", provider.Chat, chatPath, func(ts []fixtures.ChatTurn, tools string) []byte {
		return withTools(fixtures.ChatBody("gpt-5", ts, ""), tools)
	}},
	{"responses", provider.Responses, responsesPath, func(ts []fixtures.ChatTurn, tools string) []byte {
		return withTools(fixtures.ResponsesBody("gpt-5", ts, "", fixtures.ResponsesOptions{}), tools)
	}},
	{"anthropic", provider.Anthropic, messagesPath, func(ts []fixtures.ChatTurn, tools string) []byte {
		return withTools(fixtures.AnthropicBody("claude-sonnet-4-5", ts, "", fixtures.AnthropicOptions{System: true}), tools)
	}},
}

// persistFails is a store whose Persist fails while fail is set: the
// compile fails open (vault_error) and the original goes upstream.
type persistFails struct {
	*compilertest.MemStore
	fail bool
}

func (s *persistFails) Persist(ctx context.Context, scope artifact.Scope, arts []artifact.Artifact) error {
	if s.fail {
		return errors.New("persist refused")
	}
	return s.MemStore.Persist(ctx, scope, arts)
}

// A conversation that was sent the tool keeps it: when one request fails
// open (the vault refuses a write, so the original goes upstream without
// the tool), the next request is a rewrite again, with the identical tools
// bytes, replaying the receipts the last rewrite carried. Every request
// from the tool's first appearance on carries it, but the failed one. The
// client's tools are large (as a coding agent's are), so bringing the tool
// back by re-writing the prompt would not pay: only the replay of the last
// rewrite, which the provider still holds, does.
func TestStickyToolSurvivesFailOpen(t *testing.T) {
	turns := fixtures.Turns(90, 8, 9000)
	for _, f := range cachedFormats {
		t.Run(f.name, func(t *testing.T) {
			own := largeClientTools(f.format, 120000)
			store := &persistFails{MemStore: compilertest.NewMemStore()}
			c := newCompiler(t, recoveryOptions(), store, nil)
			at := time.Unix(1_800_000_000, 0)
			var tools, lastRewrite []byte
			for step := 1; step <= len(turns); step++ {
				store.fail = step == 5
				body := f.body(turns[:step], own)
				res := c.Compile(context.Background(), compiler.Request{Path: f.path, Body: body, Time: at.Add(time.Duration(step) * 20 * time.Second),
					Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce})
				switch {
				case step == 5:
					if res.Decision != compiler.Passthrough || res.Reason != compiler.ReasonVaultError || res.RecoveryTool {
						t.Fatalf("step 5: %s %s tool=%v, want the original (vault_error)", res.Decision, res.Reason, res.RecoveryTool)
					}
					continue
				case tools == nil && !res.RecoveryTool:
					continue // not introduced yet
				}
				if res.Decision != compiler.Accepted || !res.RecoveryTool {
					t.Fatalf("step %d: %s %s tool=%v: the tool was dropped", step, res.Decision, res.Reason, res.RecoveryTool)
				}
				got := toolsRaw(t, res.Body)
				if tools == nil {
					tools = got
				} else if !bytes.Equal(tools, got) {
					t.Fatalf("step %d: tools changed:\n%s\n%s", step, tools, got)
				}
				if step == 6 {
					// The stable replay of step 4's rewrite: every receipt it
					// carried is carried again.
					for _, r := range allReceipts(lastRewrite) {
						if !bytes.Contains(res.Body, []byte(r)) {
							t.Fatalf("step 6 dropped step 4's receipt %s", r)
						}
					}
				}
				lastRewrite = res.Body
			}
			if tools == nil {
				t.Fatal("the tool never went out")
			}
		})
	}
}

// A receipt the model just recovered, deep in a warm, cached prompt:
// carrying it inline again would re-write everything after it.
//   - reinline_recovered cost weighs that: the receipt stays (and a
//     recovery round is expected instead); with the cost model off, the
//     lease rule re-inlines it.
//   - on (the default) carries it inline either way, and the final gate
//     still accepts the rewrite (it is cheaper than the original, which
//     carries it inline too).
//   - off changes nothing: the lease keeps it a receipt.
func TestRecoveredReceiptWeighed(t *testing.T) {
	turns := fixtures.Turns(91, 12, 9000)
	body := func(n int) []byte {
		return fixtures.AnthropicBody("claude-sonnet-4-5", turns[:n], "", fixtures.AnthropicOptions{System: true, CacheLast: true})
	}
	first := digestOf(turns[0].Output)
	for _, tt := range []struct {
		mode    string
		costOff bool
		kept    bool
	}{
		{compiler.ReinlineCost, false, true}, {compiler.ReinlineCost, true, false},
		{"", false, false}, {compiler.ReinlineOn, true, false},
		{compiler.ReinlineOff, false, true}, {compiler.ReinlineOff, true, true},
	} {
		opts := recoveryOptions()
		opts.Cost.Off = tt.costOff
		opts.ReinlineRecovered = tt.mode
		c := newCompiler(t, opts, compilertest.NewMemStore(), nil)
		at := time.Unix(1_800_000_000, 0)
		run := func(step int) compiler.Result {
			return c.Compile(context.Background(), compiler.Request{Path: messagesPath, Body: body(step), Time: at.Add(time.Duration(step) * 20 * time.Second),
				Scope: artifact.Scope{Tenant: "t"}, Mode: compiler.ModeEnforce, DeferCommit: true})
		}
		var prev compiler.Result
		for step := 1; step <= 10; step++ {
			prev = run(step)
			if step == 10 {
				if !bytes.Contains(prev.Body, []byte(artifact.ID(first))) {
					t.Fatalf("%q cost off=%v: step 10 does not receipt the first result (%s %s)", tt.mode, tt.costOff, prev.Decision, prev.Reason)
				}
				prev.Recovered(first)
			}
			prev.Commit()
		}
		next := run(11)
		next.Commit()
		kept := bytes.Contains(next.Body, []byte(artifact.ID(first)))
		if kept != tt.kept || next.Decision != compiler.Accepted {
			t.Fatalf("%q cost off=%v: the recovered first result is kept as a receipt: %v (%s %s)", tt.mode, tt.costOff, kept, next.Decision, next.Reason)
		}
		if !kept && !bytes.Contains(next.Body, []byte(jsonString(turns[0].Output))) {
			t.Fatalf("%q cost off=%v: the recovered first result is not inline", tt.mode, tt.costOff)
		}
		if !tt.costOff && next.CostHorizonSent > next.CostHorizonRaw {
			t.Fatalf("%q: the rewrite is dearer than the original over the horizon (%.0f > %.0f)", tt.mode, next.CostHorizonSent, next.CostHorizonRaw)
		}
		if kept && !tt.costOff {
			// Kept: the prompt up to step 10's last receipt is sent again.
			end := bytes.LastIndex(prev.Body, []byte(artifact.ReceiptPrefix))
			if end < 0 || !bytes.HasPrefix(next.Body, prev.Body[:end]) {
				t.Fatal("step 11 re-wrote the cached prefix")
			}
		}
	}
}

// largeClientTools is a client tools array of one tool whose description
// is n characters.
func largeClientTools(format provider.Format, n int) string {
	tools := clientTool(format, "bash")
	desc := `"description":"` + strings.Repeat("Run a shell command. ", n/21) + `",`
	i := strings.Index(tools, `"name":`)
	if format == provider.Chat {
		i = strings.Index(tools, `"parameters":`)
	}
	return tools[:i] + desc + tools[i:]
}
