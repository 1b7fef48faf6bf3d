package compiler_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// A Claude Code-shaped session (one breakpoint on the system prompt, one
// moving to the newest block): every receipt goes out as a one-text-block
// list and the newest one carries a breakpoint of its own, so a later
// request that receipts the next result reads the prompt up to that
// receipt from the cache instead of only the system prompt, and the
// session bills less than raw. Billed by the provider-cache simulator over
// what actually went out.
func TestReceiptBreakpointKeepsLeasesCached(t *testing.T) {
	var outputs []string
	for i := range 16 {
		outputs = append(outputs, fixtures.ToolOutput(90+i, 6000))
	}
	c := newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
	var cfg cost.Config
	model := cfg.Model("anthropic_messages", "claude-sonnet-4-5")
	raw, sent := &cost.Simulator{Model: model, Config: cfg}, &cost.Simulator{Model: model, Config: cfg}
	system := cfg.Tokens(cost.Render("anthropic_messages", anthropicBody(outputs[0])).Breakpoints[0]) // the system prompt's entry
	var billedRaw, billedSent float64
	leasesReadPast := 0
	for step := 1; step <= len(outputs); step++ {
		body := anthropicBody(outputs[:step]...)
		at := t0.Add(time.Duration(step) * 20 * time.Second)
		r := c.Compile(t.Context(), compiler.Request{Path: messagesPath, Body: body,
			Scope: artifact.Scope{Tenant: "rb"}, Mode: compiler.ModeEnforce, Time: at})
		billedRaw += raw.Step(cost.Render("anthropic_messages", body), at).Cost
		b := sent.Step(cost.Render("anthropic_messages", r.Body), at)
		billedSent += b.Cost
		t.Logf("step %d %s/%s receipts %d read %.0f written %.0f cost %.0f", step, r.Decision, r.Reason, r.Receipts, b.Read, b.Written, b.Cost)
		if r.Decision != compiler.Accepted {
			continue
		}
		if err := compiler.CheckCompacted(messagesPath, body, r.Body); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		added, onReceipt := addedBreakpoints(t, body, r.Body)
		if added > 1 || (added == 1 && !onReceipt) {
			t.Fatalf("step %d: %d breakpoints added, on a receipt: %v", step, added, onReceipt)
		}
		if step >= 3 && b.Read > system+100 {
			leasesReadPast++
		}
	}
	if leasesReadPast < 3 {
		t.Fatalf("only %d leasing requests read past the system prompt from the cache", leasesReadPast)
	}
	if billedSent >= 0.85*billedRaw {
		t.Fatalf("billed %.0f sent against %.0f raw", billedSent, billedRaw)
	}
}

// addedBreakpoints counts the cache_control markers out has beyond orig's,
// and reports whether every added one sits on a receipt block (the only
// block of a tool_result's content, holding a receipt).
func addedBreakpoints(t *testing.T, orig, out []byte) (added int, onReceipt bool) {
	t.Helper()
	added = bytes.Count(out, []byte(`"cache_control"`)) - bytes.Count(orig, []byte(`"cache_control"`))
	var body struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(out, &body); err != nil {
		t.Fatal(err)
	}
	marked := 0
	for _, m := range body.Messages {
		var blocks []struct {
			Type    string          `json:"type"`
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for _, b := range blocks {
			var inner []map[string]any
			if b.Type != "tool_result" || json.Unmarshal(b.Content, &inner) != nil || len(inner) != 1 {
				continue
			}
			text, _ := inner[0]["text"].(string)
			if inner[0]["cache_control"] != nil && strings.HasPrefix(text, artifact.ReceiptPrefix) {
				marked++
			}
		}
	}
	return added, marked == added
}

// The receipt form by the client's breakpoints: block lists only when the
// client marks 5-minute breakpoints; a breakpoint added only when one of
// the four is free, and only before the client's last one.
func TestReceiptBreakpointRules(t *testing.T) {
	x := fixtures.ToolOutput(99, 6000)
	base := string(anthropicBody(x, x, "ok"))
	oneHour := strings.Replace(base, `"cache_control":{"type":"ephemeral"}`, `"cache_control":{"ttl":"1h","type":"ephemeral"}`, 1)
	noMarks := strings.ReplaceAll(base, `,"cache_control":{"type":"ephemeral"}`, "")
	noMarks = strings.ReplaceAll(noMarks, `"cache_control":{"type":"ephemeral"},`, "")
	// Four markers: two more system blocks, each with one.
	four := strings.Replace(base, `"system":[`, `"system":[{"cache_control":{"type":"ephemeral"},"text":"a","type":"text"},{"cache_control":{"type":"ephemeral"},"text":"b","type":"text"},`, 1)
	// SWE-agent's shape: the last two user messages marked (the client's
	// second breakpoint already ends before the newest round).
	enc, _ := json.Marshal(x)
	twoInHistory := strings.Replace(base, `{"content":`+string(enc[:20]), `{"cache_control":{"type":"ephemeral"},"content":`+string(enc[:20]), 1)
	systemOnly := strings.Replace(base, `{"cache_control":{"type":"ephemeral"},"content":"ok"`, `{"content":"ok"`, 1)
	if strings.Count(four, `"cache_control"`) != 4 || strings.Count(base, `"cache_control"`) != 2 || strings.Contains(noMarks, "cache_control") ||
		strings.Count(systemOnly, `"cache_control"`) != 1 || strings.Count(twoInHistory, `"cache_control"`) != 3 {
		t.Fatal("fixtures")
	}
	for _, tt := range []struct {
		name          string
		body          string
		blocks, added bool
	}{
		{"two 5-minute breakpoints", base, true, true},
		{"four breakpoints", four, true, false},
		{"two breakpoints in the history", twoInHistory, false, false},
		{"a 1-hour breakpoint", oneHour, false, false},
		{"no breakpoints", noMarks, false, false},
		{"a breakpoint on the system prompt only", systemOnly, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
			r := c.Compile(t.Context(), compiler.Request{Path: messagesPath, Body: []byte(tt.body),
				Scope: artifact.Scope{Tenant: "rr"}, Mode: compiler.ModeEnforce, Time: t0})
			if r.Decision != compiler.Accepted || r.Receipts == 0 {
				t.Fatalf("%s/%s receipts %d", r.Decision, r.Reason, r.Receipts)
			}
			if err := compiler.CheckCompacted(messagesPath, []byte(tt.body), r.Body); err != nil {
				t.Fatal(err)
			}
			blocks := bytes.Contains(r.Body, []byte(`[{"type":"text","text":"`+artifact.ReceiptPrefix))
			added, onReceipt := addedBreakpoints(t, []byte(tt.body), r.Body)
			if blocks != tt.blocks || (added == 1) != tt.added || added > 1 || !onReceipt {
				t.Fatalf("block receipts %v, %d breakpoints added (on a receipt %v); want %v, %v", blocks, added, onReceipt, tt.blocks, tt.added)
			}
			again := c.Compile(t.Context(), compiler.Request{Path: messagesPath, Body: []byte(tt.body),
				Scope: artifact.Scope{Tenant: "rr"}, Mode: compiler.ModeEnforce, Time: t0})
			if !bytes.Equal(again.Body, r.Body) {
				t.Fatal("the same request compiled to other bytes")
			}
		})
	}
}
