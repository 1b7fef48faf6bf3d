package compiler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
)

const (
	responsesPath = "/v1/responses"
	messagesPath  = "/v1/messages"
)

func compileAt(c *compiler.Compiler, path, tenant string, body []byte) compiler.Result {
	return c.Compile(context.Background(), compiler.Request{Path: path, Body: body,
		Scope: artifact.Scope{Tenant: tenant}, Mode: compiler.ModeEnforce})
}

// assertValidRewrite is the full oracle for one compile: pass-through is the
// original slice; an accepted rewrite is strictly smaller, is the original
// with whole values replaced by receipts (assertSpliced, independent of the
// compiler's parser), passes the compiler's own validity check, and every
// receipt sits where the format allows one (assertPlaces, again
// independent).
func assertValidRewrite(t testing.TB, path string, body []byte, res compiler.Result) {
	t.Helper()
	if res.Decision != compiler.Accepted {
		if !bytes.Equal(res.Body, body) {
			t.Fatalf("pass-through (%s) changed bytes", res.Reason)
		}
		return
	}
	if len(res.Body) >= len(body) || res.SentBytes != len(res.Body) {
		t.Fatalf("accepted a rewrite that is not smaller: %d -> %d", len(body), len(res.Body))
	}
	assertSpliced(t, body, res.Body)
	if err := compiler.CheckRewrite(path, body, res.Body); err != nil {
		t.Fatalf("validity check: %v", err)
	}
	if n := assertPlaces(t, path, res.Body); n != res.Receipts {
		t.Fatalf("%d receipts in allowed places, result says %d", n, res.Receipts)
	}
}

// assertPlaces decodes the output with encoding/json and checks that every
// receipt string is the value of a tool-result slot of the format; it
// returns the number of receipts.
func assertPlaces(t testing.TB, path string, out []byte) int {
	t.Helper()
	var root any
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&root); err != nil {
		t.Fatalf("output does not decode: %v", err)
	}
	total := 0
	countReceipts(root, &total)
	inSlots := 0
	obj, _ := root.(map[string]any)
	isReceipt := func(v any) bool {
		if l, ok := v.([]any); ok && len(l) == 1 { // an Anthropic receipt block list
			b, _ := l[0].(map[string]any)
			v = b["text"]
		}
		s, ok := v.(string)
		return ok && strings.Contains(s, artifact.ReceiptPrefix) // whole, or inside a client wrapper
	}
	switch {
	case strings.HasSuffix(path, "/responses"):
		items, _ := obj["input"].([]any)
		for _, it := range items {
			m, _ := it.(map[string]any)
			if typ := m["type"]; (typ == "function_call_output" || typ == "custom_tool_call_output") && isReceipt(m["output"]) {
				inSlots++
			}
		}
	case strings.HasSuffix(path, "/messages"):
		msgs, _ := obj["messages"].([]any)
		for _, mv := range msgs {
			m, _ := mv.(map[string]any)
			blocks, _ := m["content"].([]any)
			if m["role"] != "user" {
				continue
			}
			for _, bv := range blocks {
				b, _ := bv.(map[string]any)
				if b["type"] == "tool_result" && isReceipt(b["content"]) {
					inSlots++
				}
			}
		}
	case strings.HasSuffix(path, ":generateContent"), strings.HasSuffix(path, ":streamGenerateContent"):
		contents, _ := obj["contents"].([]any)
		for _, cv := range contents {
			c, _ := cv.(map[string]any)
			parts, _ := c["parts"].([]any)
			for _, pv := range parts {
				p, _ := pv.(map[string]any)
				fr, _ := p["functionResponse"].(map[string]any)
				resp, _ := fr["response"].(map[string]any)
				for _, v := range resp {
					if isReceipt(v) {
						inSlots++
					}
				}
			}
		}
	case strings.HasSuffix(path, "/chat/completions"):
		msgs, _ := obj["messages"].([]any)
		for _, mv := range msgs {
			m, _ := mv.(map[string]any)
			if (m["role"] == "tool" || m["role"] == "function") && isReceipt(m["content"]) {
				inSlots++
			}
		}
	}
	if inSlots != total {
		t.Fatalf("%d receipts, only %d in tool-result slots", total, inSlots)
	}
	return total
}

func countReceipts(v any, n *int) {
	switch x := v.(type) {
	case string:
		if strings.Contains(x, artifact.ReceiptPrefix) {
			*n++
		}
	case []any:
		for _, e := range x {
			countReceipts(e, n)
		}
	case map[string]any:
		for _, e := range x {
			countReceipts(e, n)
		}
	}
}

// jstr is s as a JSON string literal.
func jstr(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// decode unmarshals a body into generic JSON.
func decode(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// mustContainOnce checks that needle occurs exactly once in body: the
// byte-identity of a never-touch region is then a matter of finding it.
func mustContainOnce(t testing.TB, body []byte, needle string) {
	t.Helper()
	if n := bytes.Count(body, []byte(needle)); n != 1 {
		t.Fatalf("%.60q occurs %d times, want 1", needle, n)
	}
}
