package compiler

import (
	"bytes"
	"testing"
	"unicode/utf8"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
)

// FuzzWithoutWorkingState: the checker's rule for the block never panics,
// and whatever it removes leaves a valid JSON body that is the input minus
// one block (so it can only ever take out what the compiler put in).
func FuzzWithoutWorkingState(f *testing.F) {
	block := workingStateBlock([]wsEntry{{digest: artifact.Digest{1}, tool: "read_file", args: `{"path":"a.go"}`, chars: 9000}}, 2000)
	esc := string(wsInsertion("text", block, true))
	f.Add([]byte(`{"messages":[{"role":"user","content":"hi`+esc+`"}]}`), uint8(0))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}`+string(wsInsertion("text", block, false))+`]}]}`), uint8(2))
	f.Add([]byte(`{"input":[{"role":"user","content":[{"type":"input_text","text":"hi"}`+string(wsInsertion("input_text", block, false))+`]}]}`), uint8(1))
	f.Add([]byte(`{"messages":[{"role":"user","content":"<working_state>"}]}`), uint8(0))
	paths := []string{"/v1/chat/completions", "/v1/responses", "/v1/messages"}
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		path := paths[int(which)%len(paths)]
		out := WithoutWorkingState(path, body)
		if bytes.Equal(out, body) {
			return
		}
		if _, err := jsonv.Parse(out, maxDepthForRequests); err != nil {
			t.Fatalf("removal left invalid JSON: %v", err)
		}
		if len(out) >= len(body) || !bytes.Contains(body, []byte(workingStateOpen)) {
			t.Fatalf("removal took out something that is not a block")
		}
		if bytes.Count(body, []byte(workingStateOpen)) != bytes.Count(out, []byte(workingStateOpen))+1 {
			t.Fatalf("removal took out other than exactly one block")
		}
	})
}

// FuzzArgPath: a path taken from arguments is only path characters, at
// most wsPathChars characters, and never breaks the block's grammar.
func FuzzArgPath(f *testing.F) {
	for _, s := range []string{`{"path":"src/a.go"}`, `{"file_path":"C:\\x\\y"}`, `{"path":"https://x/y"}`, `{"path":"` + string(bytes.Repeat([]byte("a/"), 100)) + `"}`, `not json`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, args string) {
		p := argPath(args)
		if p == "" {
			return
		}
		if n := utf8.RuneCountInString(p); n > wsPathChars {
			t.Fatalf("path of %d characters", n)
		}
		b := workingStateBlock([]wsEntry{{digest: artifact.Digest{2}, tool: "t", args: args, chars: 1}}, WorkingStateMaxChars)
		if !wsBlockRE.MatchString(b) {
			t.Fatalf("block with path %q does not match the grammar", p)
		}
	})
}
