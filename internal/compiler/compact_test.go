package compiler_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// conversation renders a chat request with n person turns; each turn is a
// user message, a tool call, its result of resultChars, and a final text.
// mutate may adjust the message list before rendering.
func conversation(n, resultChars int, mutate func([]any) []any) []byte {
	msgs := []any{map[string]any{"role": "system", "content": "You are helpful."}}
	for t := 0; t < n; t++ {
		id := fmt.Sprintf("call_%d", t)
		msgs = append(msgs,
			map[string]any{"role": "user", "content": fmt.Sprintf("Question %d: please look at file %d", t, t)},
			map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{"id": id, "type": "function",
				"function": map[string]any{"name": "read_file", "arguments": fmt.Sprintf(`{"path":"f%d"}`, t)}}}},
			map[string]any{"role": "tool", "tool_call_id": id, "content": fixtures.ToolOutput(500+t, resultChars)},
			map[string]any{"role": "assistant", "content": fmt.Sprintf("File %d looks fine.", t)})
	}
	if mutate != nil {
		msgs = mutate(msgs)
	}
	b, _ := json.Marshal(map[string]any{"model": "gpt-4o", "messages": msgs})
	return b
}

func compactOpts(recent, collapse int) compiler.Options {
	return compiler.Options{InlineLeases: 0, Compaction: compiler.Compaction{
		Enabled: true, MinVaultChars: 4000, InlineRecentTurns: recent, CollapseAfterTurns: collapse}}
}

type chatMsg struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
}

func messagesOf(t testing.TB, body []byte) []chatMsg {
	t.Helper()
	var v struct{ Messages []chatMsg }
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	return v.Messages
}

func contentString(m chatMsg) string {
	var s string
	_ = json.Unmarshal(m.Content, &s)
	return s
}

func TestCompactionWindows(t *testing.T) {
	tests := []struct {
		turns, recent, collapse  int
		wantReceipts, wantFolded int
	}{
		// Boundaries move with the turn count rounded down to a block of 4.
		{3, 5, 6, 0, 0},  // everything recent
		{5, 5, 6, 0, 0},  // 4 aligned turns, all recent
		{8, 5, 6, 1, 2},  // 8 aligned: results of turns 0-2 vaulted, turns 0-1 folded
		{11, 5, 6, 1, 2}, // same block: same decisions
		{13, 5, 6, 1, 6}, // 12 aligned: turns 0-5 folded, turn 6 vaulted
		{9, 5, 0, 3, 0},  // collapse off
		{4, 0, 0, 4, 0},  // recent 0: every answered result vaulted
		{8, 0, 4, 4, 4},  // recent 0, collapse 4
		{12, 2, 4, 2, 8}, // turns 0-7 folded, 8-9 vaulted, 10-11 recent
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("T%d_R%d_C%d", tt.turns, tt.recent, tt.collapse), func(t *testing.T) {
			body := conversation(tt.turns, 5000, nil)
			store := compilertest.NewMemStore()
			c := newCompiler(t, compactOpts(tt.recent, tt.collapse), store, nil)
			res := compile(c, "t", body)
			if res.Receipts != tt.wantReceipts || res.Folded != tt.wantFolded {
				t.Fatalf("receipts %d folded %d (%s/%s), want %d and %d", res.Receipts, res.Folded,
					res.Decision, res.Reason, tt.wantReceipts, tt.wantFolded)
			}
			if res.Receipts+res.Folded == 0 {
				if !bytes.Equal(res.Body, body) {
					t.Fatal("pass-through changed bytes")
				}
				return
			}
			if err := compiler.CheckCompacted(chatPath, body, res.Body); err != nil {
				t.Fatal(err)
			}
			// The recent turns are untouched: the output ends with exactly
			// the original bytes of the last `recent` turns.
			orig := messagesOf(t, body)
			out := messagesOf(t, res.Body)
			tail := 4 * tt.recent
			for i := 1; i <= tail; i++ {
				if !bytes.Equal(orig[len(orig)-i].Content, out[len(out)-i].Content) {
					t.Fatalf("recent message -%d changed", i)
				}
			}
			// Folded turns became summaries, in order, after the system prompt.
			for i := 0; i < tt.wantFolded; i++ {
				s := contentString(out[1+i])
				if out[1+i].Role != "user" || !strings.HasPrefix(s, artifact.FoldPrefix) ||
					!strings.Contains(s, fmt.Sprintf(`user="Question %d:`, i)) ||
					!strings.Contains(s, "tools=read_file×1") || !strings.Contains(s, fmt.Sprintf(`assistant="File %d looks fine."`, i)) {
					t.Fatalf("summary %d: %q", i, s)
				}
				if len(s) > 600 {
					t.Fatalf("summary too long: %d", len(s))
				}
			}
		})
	}
}

// A replayed session: each step appends a turn. Compaction decisions are
// sticky (a compacted item carries the same bytes in every later request)
// and the compacted prefix only grows at its end.
func TestCompactionStickyPrefix(t *testing.T) {
	store := compilertest.NewMemStore()
	c := newCompiler(t, compactOpts(5, 6), store, nil)
	var prev []byte
	prevSummaries := 0
	for n := 1; n <= 22; n++ {
		body := conversation(n, 5000, nil)
		res := compile(c, "t", body)
		if again := compile(c, "t", body); !bytes.Equal(again.Body, res.Body) {
			t.Fatalf("step %d: not deterministic", n)
		}
		if res.Decision == compiler.Accepted {
			if err := compiler.CheckCompacted(chatPath, body, res.Body); err != nil {
				t.Fatalf("step %d: %v", n, err)
			}
		}
		// Every summary already sent is sent again unchanged, at the same
		// place: the previous output up to the end of its last summary is a
		// prefix of this one. Every receipt already sent is sent again, unless
		// its turn has been folded since.
		if prev != nil {
			end := lastCompacted(prev)
			if end > 0 && !bytes.HasPrefix(res.Body, prev[:end]) {
				t.Fatalf("step %d rewrote the compacted prefix of step %d", n, n-1)
			}
			folded := strings.Count(string(res.Body), artifact.FoldPrefix) > prevSummaries
			for _, r := range receipts(t, prev) {
				if !folded && !bytes.Contains(res.Body, []byte(r)) {
					t.Fatalf("step %d dropped a receipt of step %d", n, n-1)
				}
			}
			if !folded && lastCompacted(prev) > 0 && !bytes.HasPrefix(res.Body, prev[:lastReceipt(prev)]) {
				t.Fatalf("step %d changed bytes before a receipt of step %d", n, n-1)
			}
		}
		if s := strings.Count(string(res.Body), artifact.FoldPrefix); s < prevSummaries {
			t.Fatalf("step %d: summaries went from %d to %d", n, prevSummaries, s)
		} else {
			prevSummaries = s
		}
		prev = res.Body
	}
	if prevSummaries != 14 {
		t.Fatalf("after 22 turns %d summaries, want 14", prevSummaries)
	}
}

// lastCompacted returns the offset just past the last summary.
func lastCompacted(body []byte) int { return endOf(body, artifact.FoldPrefix) }

// lastReceipt returns the offset just past the last receipt or summary.
func lastReceipt(body []byte) int {
	return max(endOf(body, artifact.FoldPrefix), endOf(body, artifact.ReceiptPrefix))
}

func endOf(body []byte, prefix string) int {
	if i := bytes.LastIndex(body, []byte(prefix)); i >= 0 {
		if j := bytes.IndexByte(body[i:], '"'); j > 0 {
			return i + j
		}
	}
	return 0
}

func TestCompactionPinnedAndMultimodal(t *testing.T) {
	body := conversation(12, 5000, func(msgs []any) []any {
		// A developer message in the middle of turn 1, and a multimodal
		// user message starting turn 2.
		out := append([]any{}, msgs[:7]...)
		out = append(out, map[string]any{"role": "developer", "content": "Be brief."})
		out = append(out, msgs[7:]...)
		out[10] = map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "Look at this picture"},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,AAAA"}}}}
		return out
	})
	c := newCompiler(t, compactOpts(5, 6), compilertest.NewMemStore(), nil)
	res := compile(c, "t", body)
	if res.Folded != 6 {
		t.Fatalf("folded %d (%s)", res.Folded, res.Reason)
	}
	if err := compiler.CheckCompacted(chatPath, body, res.Body); err != nil {
		t.Fatal(err)
	}
	out := messagesOf(t, res.Body)
	roles := []string{}
	for _, m := range out[:7] {
		roles = append(roles, m.Role)
	}
	if got := strings.Join(roles, ","); got != "system,user,user,developer,user,user,user" {
		t.Fatalf("roles %s", got)
	}
	if !strings.Contains(contentString(out[4]), `user="Look at this picture"`) {
		t.Fatalf("multimodal summary %q", contentString(out[4]))
	}
}

func TestFoldedTurnRecoversExactly(t *testing.T) {
	body := conversation(12, 5000, nil)
	store := compilertest.NewMemStore()
	c := newCompiler(t, compactOpts(5, 6), store, nil)
	res := compile(c, "t", body)
	out := messagesOf(t, res.Body)
	orig := messagesOf(t, body)
	s := contentString(out[1])
	id := s[len(artifact.FoldPrefix) : len(artifact.FoldPrefix)+34]
	found := false
	for _, a := range store.All("t") {
		if artifact.ID(a.Digest) != id {
			continue
		}
		found = true
		// The artifact is the turn's exact original bytes.
		if !bytes.Contains(body, []byte(a.Text)) {
			t.Fatal("vaulted turn is not the original bytes")
		}
		var msgs []chatMsg
		if err := json.Unmarshal([]byte("["+a.Text+"]"), &msgs); err != nil || len(msgs) != 4 {
			t.Fatalf("vaulted turn: %d messages, %v", len(msgs), err)
		}
		for i := range msgs {
			if !bytes.Equal(msgs[i].Content, orig[1+i].Content) {
				t.Fatalf("message %d differs", i)
			}
		}
	}
	if !found {
		t.Fatalf("no artifact %s", id)
	}
}

func TestCompactionNeverTouchesUnansweredResults(t *testing.T) {
	// The last message is a fresh tool result the model has not seen.
	body := conversation(4, 5000, func(m []any) []any { return m[:len(m)-1] })
	c := newCompiler(t, compactOpts(0, 0), compilertest.NewMemStore(), nil)
	res := compile(c, "t", body)
	if res.Receipts != 3 {
		t.Fatalf("receipts %d, want 3 (the unanswered result stays)", res.Receipts)
	}
	out := messagesOf(t, res.Body)
	if strings.HasPrefix(contentString(out[len(out)-1]), artifact.ReceiptPrefix) {
		t.Fatal("unanswered result vaulted")
	}
}

// A turn shorter than its summary stays inline; the turns around it fold.
func TestCompactionKeepsSmallTurns(t *testing.T) {
	body := conversation(12, 5000, func(msgs []any) []any {
		// Turn 0 becomes a greeting: no tool call, a few bytes.
		msgs = append(msgs[:2], msgs[4:]...)
		msgs[1].(map[string]any)["content"] = "Hi"
		msgs[2].(map[string]any)["content"] = "Hello"
		return msgs
	})
	c := newCompiler(t, compactOpts(5, 6), compilertest.NewMemStore(), nil)
	res := compile(c, "t", body)
	if res.Folded != 5 {
		t.Fatalf("folded %d (%s), want 5", res.Folded, res.Reason)
	}
	if err := compiler.CheckCompacted(chatPath, body, res.Body); err != nil {
		t.Fatal(err)
	}
	out, orig := messagesOf(t, res.Body), messagesOf(t, body)
	for i := 0; i < 3; i++ { // system and the whole of turn 0, unchanged
		if out[i].Role != orig[i].Role || !bytes.Equal(out[i].Content, orig[i].Content) {
			t.Fatalf("message %d changed", i)
		}
	}
	if !strings.HasPrefix(contentString(out[3]), artifact.FoldPrefix) {
		t.Fatal("turn 1 not folded")
	}
}
