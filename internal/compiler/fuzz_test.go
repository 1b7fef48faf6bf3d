package compiler_test

import (
	"bytes"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// FuzzCompileChat: whatever the input, the compiler returns either the
// original bytes or a strictly smaller valid JSON body that differs from the
// original only inside replaced values; it never panics.
func FuzzCompileChat(f *testing.F) {
	o := fixtures.ToolOutput(1, 300)
	f.Add(fixtures.ChatBody("gpt-4o", []fixtures.ChatTurn{{Tool: "bash", Output: o}, {Tool: "bash", Output: o}}, "hi"))
	f.Add([]byte(`{"messages":[{"role":"tool","tool_call_id":"a","content":[{"type":"text","text":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}]},{"role":"tool","tool_call_id":"a","content":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}]}`))
	f.Add([]byte(`{"messages":[{"role":"function","name":"f","content":"\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"}, {"role":"function","name":"f","content":"ééééééééééééééééééééé"}]}`))
	f.Add([]byte(`[]`))
	f.Add(chatWrappedBodySized([]int{1, 2, 1}, 100))
	f.Fuzz(func(t *testing.T, body []byte) {
		store := compilertest.NewMemStore()
		c, err := compiler.New(compiler.Options{MinArtifactChars: 16, InlineLeases: 1}, store, nil)
		if err != nil {
			t.Fatal(err)
		}
		orig := bytes.Clone(body)
		for i := 0; i < 2; i++ { // the second pass sees the first as its history
			res := compile(c, "t", body)
			if res.Reason == compiler.ReasonPanic || res.Reason == compiler.ReasonInternal {
				t.Fatalf("compiler %s", res.Reason)
			}
			if !bytes.Equal(body, orig) {
				t.Fatalf("input modified")
			}
			if res.Decision != compiler.Accepted {
				if !bytes.Equal(res.Body, body) {
					t.Fatalf("pass-through changed bytes")
				}
				continue
			}
			if len(res.Body) >= len(body) {
				t.Fatalf("accepted a rewrite that is not smaller")
			}
			assertSpliced(t, body, res.Body)
		}
	})
}
