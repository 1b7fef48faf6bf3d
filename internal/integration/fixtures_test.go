package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
)

// Fixtures are generated, not checked in: OpenAI Chat Completions bodies of
// an agent conversation whose tool results are large.

// msg is one chat message; fields are emitted in a fixed order.
type msg struct {
	Role       string     `json:"role"`
	Content    any        `json:"content"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// bigOutput returns deterministic tool output of exactly n bytes (ASCII)
// that looks like a command's output and differs per seed.
func bigOutput(seed string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		h := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", seed, i)))
		fmt.Fprintf(&b, "%s:%05d: drwxr-xr-x 2 agent agent 4096 %s \"quoted\"\tpath/to/file_%d.go\n", seed, i, hex.EncodeToString(h[:12]), i)
	}
	return b.String()[:n]
}

// conversation builds the growing message list of one agent run.
type conversation struct {
	model string
	msgs  []msg
	calls int
}

func newConversation(system, user string) *conversation {
	return &conversation{model: "gpt-4o", msgs: []msg{
		{Role: "system", Content: system},
		{Role: "user", Content: user},
	}}
}

// tool appends an assistant tool call and its result.
func (c *conversation) tool(name, args, output string) *conversation {
	c.calls++
	id := fmt.Sprintf("call_%d", c.calls)
	tc := toolCall{ID: id, Type: "function"}
	tc.Function.Name = name
	tc.Function.Arguments = args
	c.msgs = append(c.msgs,
		msg{Role: "assistant", Content: nil, ToolCalls: []toolCall{tc}},
		msg{Role: "tool", ToolCallID: id, Content: output},
	)
	return c
}

// say appends an assistant text reply and the user's next message.
func (c *conversation) say(assistant, user string) *conversation {
	c.msgs = append(c.msgs, msg{Role: "assistant", Content: assistant}, msg{Role: "user", Content: user})
	return c
}

// body renders the request body of the conversation as it is now.
func (c *conversation) body() []byte {
	return marshal(map[string]any{"model": c.model, "messages": c.msgs})
}

// fork copies the conversation so that two runs can diverge.
func (c *conversation) fork() *conversation {
	return &conversation{model: c.model, msgs: append([]msg(nil), c.msgs...), calls: c.calls}
}

// marshal encodes v without HTML escaping (the way agents usually do) and
// with map keys sorted (encoding/json's rule), so "model" precedes
// "messages" only by accident; the compiler must not care.
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

// jsonString is s encoded as a JSON string, as marshal writes it.
func jsonString(s string) []byte { return marshal(s) }

var receiptRE = regexp.MustCompile(`\[Token Terminator artifact a_([0-9a-f]{32}) \| tool=([A-Za-z0-9._:/-]{0,80}) \| chars=([0-9]+) \| sha256=([0-9a-f]{16})`)

// artifactID is the id a receipt names for content sent as the JSON string
// jsonString writes (the artifact identity covers the exact bytes replaced).
func artifactID(content string) string {
	s := artifact.DigestOf(content, jsonString(content))
	return hex.EncodeToString(s[:16])
}

// expectReceipted checks that got is sent with exactly the given tool
// outputs replaced by receipts naming them, every other byte identical.
// Each output must occur once in sent (as a JSON string) unless several
// occurrences are listed.
func expectReceipted(t testing.TB, sent, got []byte, outputs ...string) {
	t.Helper()
	got = compiler.WithoutRecovery(sent, got) // recovery's additions are checked in recovery_test.go
	got = compiler.WithoutReceiptBlocks(got)  // an Anthropic receipt block list stands for its string
	// Walk sent and got in step: copy equal bytes, and at each replaced
	// value expect a receipt string in got.
	type span struct{ at, n int }
	var spans []span
	for _, out := range outputs {
		enc := jsonString(out)
		from := 0
		if len(spans) > 0 {
			// several identical outputs: take the next occurrence
			for _, s := range spans {
				if bytes.Equal(sent[s.at:s.at+s.n], enc) && s.at+s.n > from {
					from = s.at + s.n
				}
			}
		}
		i := bytes.Index(sent[from:], enc)
		if i < 0 {
			t.Fatalf("fixture error: output not found in sent body")
		}
		spans = append(spans, span{from + i, len(enc)})
	}
	// sort spans by position
	for i := range spans {
		for j := i + 1; j < len(spans); j++ {
			if spans[j].at < spans[i].at {
				spans[i], spans[j] = spans[j], spans[i]
			}
		}
	}
	idOf := map[artifact.Digest]string{}
	contentOf := map[string]artifact.Digest{}
	gi, si := 0, 0
	for _, sp := range spans {
		pre := sent[si:sp.at]
		if !bytes.HasPrefix(got[gi:], pre) {
			t.Fatalf("bytes before a replaced value differ (sent offset %d)", si)
		}
		gi += len(pre)
		// got[gi:] must start with a JSON string holding a receipt
		var s string
		dec := json.NewDecoder(bytes.NewReader(got[gi:]))
		if err := dec.Decode(&s); err != nil {
			t.Fatalf("no JSON string where a receipt was expected at %d: %v", gi, err)
		}
		m := receiptRE.FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("value at %d is not a receipt: %.200q", gi, s)
		}
		orig := sent[sp.at : sp.at+sp.n]
		var content string
		_ = json.Unmarshal(orig, &content)
		// The gateway names artifacts by a keyed hash of their content
		// identity (encrypt on), which only the tenant's key computes:
		// here one content has one id and two contents two ids, and
		// the id is the content identity where no key is used.
		d := artifact.DigestOf(content, orig)
		if prev, ok := idOf[d]; ok && prev != m[1] {
			t.Fatalf("one content named a_%s and a_%s", prev, m[1])
		}
		if prev, ok := contentOf[m[1]]; ok && prev != d {
			t.Fatalf("a_%s names two contents", m[1])
		}
		idOf[d], contentOf[m[1]] = m[1], d
		if m[4] != m[1][:16] {
			t.Fatalf("receipt a_%s says sha256=%s", m[1], m[4])
		}
		if len(s) >= 300 {
			t.Fatalf("receipt is %d chars, want < 300", len(s))
		}
		if strings.Contains(s, content[:40]) {
			t.Fatal("receipt contains content")
		}
		gi += int(dec.InputOffset())
		si = sp.at + sp.n
	}
	if !bytes.Equal(got[gi:], sent[si:]) {
		t.Fatalf("bytes after the last replaced value differ")
	}
	if n := len(receiptRE.FindAll(got, -1)); n != len(outputs) {
		t.Fatalf("%d receipts in forwarded body, want %d", n, len(outputs))
	}
}

// fixture sanity: the generators produce what the tests assume.
func TestFixtures(t *testing.T) {
	out := bigOutput("ls", 9000)
	if len(out) != 9000 || bigOutput("ls", 9000) != out || bigOutput("cat", 9000) == out {
		t.Fatal("bigOutput is not deterministic per seed")
	}
	c := newConversation("You are a coding agent.", "List the repo.").tool("bash", `{"cmd":"ls -la"}`, out)
	var v map[string]any
	if err := json.Unmarshal(c.body(), &v); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(c.body(), jsonString(out)) {
		t.Fatal("encoded output not found in body")
	}
	// a receipt-shaped replacement passes expectReceipted
	receipt := fmt.Sprintf("[Token Terminator artifact a_%s | tool=bash | chars=9000 | sha256=%s…]", artifactID(out), artifactID(out)[:16])
	got := bytes.Replace(c.body(), jsonString(out), jsonString(receipt), 1)
	expectReceipted(t, c.body(), got, out)
}
