package compiler_test

import (
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

func FuzzCompileGemini(f *testing.F) {
	o := fixtures.ToolOutput(1, 300)
	turns := []fixtures.ChatTurn{{Tool: "read_file", Args: `{"p":1}`, Output: o}, {Tool: "read_file", Output: o}}
	f.Add(fixtures.GeminiBody(turns, "hi", fixtures.GeminiOptions{}))
	f.Add(fixtures.GeminiBody(turns, "", fixtures.GeminiOptions{Thoughts: true, Parallel: true}))
	f.Add([]byte(`{"contents":[{"role":"model","parts":[{"text":"t","thought":true,"thoughtSignature":"s"},{"functionCall":{"name":"f","args":{},"id":"a:1"}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","id":"a:1","response":{"output":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx","n":[1,"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"]}}},{"text":"go"}]}],"cachedContent":"cachedContents/x"}`))
	f.Add([]byte(`{"contents":[{"parts":[{"functionResponse":{"name":"f","response":{"o":"\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"}}},{"functionResponse":{"name":"f","response":{"o":"éééééééééééééééééé"}}}]}]}`))
	f.Add(geminiConversation(3))
	f.Fuzz(func(t *testing.T, body []byte) { fuzzFormat(t, geminiPath, body) })
}
