package tokens

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// corpusDir is the shared corpus, "" when absent (the tests using it skip).
var corpusDir, _ = fixtures.CorpusDir()

func init() {
	// The default loader downloads BPE files; the offline one reads the
	// copies embedded in the binary. Tests never touch the network.
	tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
}

// oracles are tiktoken-go's encoders, the reference the package is
// checked against; built once per test binary (0.1-0.3 s each).
var oracles sync.Map // encoding name -> func() (*tiktoken.Tiktoken, error)

func oracle(t testing.TB, enc string) *tiktoken.Tiktoken {
	t.Helper()
	get, _ := oracles.LoadOrStore(enc, sync.OnceValues(func() (*tiktoken.Tiktoken, error) { return tiktoken.GetEncoding(enc) }))
	tk, err := get.(func() (*tiktoken.Tiktoken, error))()
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// direct is the reference count: tiktoken-go on the whole text at once.
func direct(t testing.TB, enc, s string) int {
	t.Helper()
	return len(oracle(t, enc).Encode(s, nil, nil))
}

// composed counts b piece by piece as split cuts it.
func composed(t testing.TB, enc string, b []byte, minSize int, bits uint) (n, pieces int) {
	t.Helper()
	tk := oracle(t, enc)
	split(b, minSize, bits, func(p []byte) {
		n += len(tk.EncodeOrdinary(string(p)))
		pieces++
	})
	return n, pieces
}

// newCounter returns a counter with a budget long enough to always finish.
func newCounter(t testing.TB, tokenizer string) *Counter {
	t.Helper()
	c, err := New(Config{Tokenizer: tokenizer, Budget: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fragments mixes the characters the pre-tokenizer regexes treat specially:
// contractions, whitespace runs before words, newlines, digits, marks, CJK,
// emoji, JSON escapes and punctuation runs.
var fragments = []string{
	"the", "The", "THE", "don't", "it's", "I'M", "we'll", "'s", "'", "''", "x", "y2", "123", "4567",
	"3.14", " ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n", "\\n", "\\t", "\\\"", "\"", "{", "}",
	"[", "]", ":", ",", "},{\"", "\":\"", "//", "/", "==", "->", "()", "...", "日本語", "テスト", "中文",
	"😀", "👍🏽", "e\u0301", "\u0301", "naïve", "Straße", "ǅ", "\u00a0", "\u3000", "<|endoftext|>",
	"func", "return", "self.x", "README.md", "a_b", "CamelCase", "snake_case", "\x00", "\x1f", "\xff",
}

// genText returns about n bytes of varied text.
func genText(r *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(fragments[r.IntN(len(fragments))])
		if r.IntN(3) == 0 {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

var proseWords = strings.Fields(`the a of to and in is that for it with as was on be by this are
from or an at not have has but which their can more one all will if when file line error value
return function def class import self config test path data request response model token cache
count body message tool result user assistant system content string int error nil true false`)

// genToolResult returns about n bytes of tool-output-like text: code and
// prose lines with indentation, numbers and punctuation, seeded by r.
func genToolResult(r *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		fmt.Fprintf(&b, "%4d\t", r.IntN(5000))
		for range r.IntN(4) {
			b.WriteString("    ")
		}
		for w := range 3 + r.IntN(10) {
			if w > 0 {
				b.WriteString([]string{" ", " ", " ", ", ", ".", "(", ") ", " = ", "_", ": "}[r.IntN(10)])
			}
			b.WriteString(proseWords[r.IntN(len(proseWords))])
			if r.IntN(8) == 0 {
				fmt.Fprintf(&b, "%d", r.IntN(100000))
			}
		}
		b.WriteString([]string{"\n", "\n", ";\n", ":\n", " {\n", "}\n", " # note: don't\n"}[r.IntN(7)])
	}
	return b.String()
}

type msg struct {
	Role       string `json:"role"`
	Content    string `json:"content"`
	ToolCallID string `json:"tool_call_id,omitempty"`
}

// chatBody serializes an OpenAI chat request the way SDKs do (no HTML
// escaping), with a tools array after the messages as real agents send.
func chatBody(model string, msgs []msg) []byte {
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	tools := []map[string]any{{"type": "function", "function": map[string]any{
		"name": "bash", "description": "Run a shell command and return its output.",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{
			"command": map[string]any{"type": "string"}}}}}}
	if err := e.Encode(map[string]any{"model": model, "messages": msgs, "tools": tools}); err != nil {
		panic(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// history returns a conversation of about size bytes made of large tool
// results.
func history(r *rand.Rand, size int) []msg {
	msgs := []msg{{Role: "system", Content: "You are a coding agent."}}
	for n := 0; n < size; {
		msgs = append(msgs,
			msg{Role: "user", Content: genToolResult(r, 200)},
			msg{Role: "tool", ToolCallID: fmt.Sprintf("call_%d", len(msgs)), Content: genToolResult(r, 20000)})
		n += 20200
	}
	return msgs
}

// corpusBodies returns every request body of the corpus (last-step files,
// and the lines of the steps files unless short), skipping when absent.
func corpusBodies(t *testing.T, steps bool) map[string][]byte {
	t.Helper()
	if _, err := os.Stat(corpusDir); err != nil {
		t.Skip("corpus absent:", corpusDir)
	}
	out := map[string][]byte{}
	err := filepath.WalkDir(corpusDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch {
		case strings.HasSuffix(path, ".last.json"):
			b, err := os.ReadFile(path)
			out[path] = b
			return err
		case steps && strings.HasSuffix(path, ".steps.jsonl"):
			b, err := os.ReadFile(path)
			for i, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
				out[fmt.Sprintf("%s:%d", path, i+1)] = line
			}
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
