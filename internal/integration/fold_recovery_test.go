package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
)

var foldIDRE = regexp.MustCompile(regexp.QuoteMeta(artifact.FoldPrefix) + `(a_[0-9a-f]{32}) \| messages=(\d+) `)

// A folded turn recovers, through the artifact API of a real Caddy, as the
// JSON array of the turn's exact messages: the content parses with a JSON
// parser, its elements are byte for byte a run of the client's messages
// as long as the summary says, and total_chars and sha256 describe that
// text. All three formats.
func TestFoldedTurnRecoversAsJSONArray(t *testing.T) {
	up := newUpstream(t)
	g := startGateway(t, `
	token_terminator {
		vault_dir $VAULT
		collapse_after_turns 4
		inline_recent_turns 2
	}
	reverse_proxy $UPSTREAM
`, up)
	for i, format := range []provider.Format{provider.Chat, provider.Responses, provider.Anthropic} {
		t.Run(string(format), func(t *testing.T) {
			cred := fmt.Sprintf("Authorization: Bearer sk-fold-%d", i)
			// The last step of a long session, cold: folding its old turns
			// pays at once.
			reqs := fixtures.Session(fixtures.SessionOptions{Format: format, Steps: 24, PersonTurns: 12, OutputChars: 600, Seed: 70 + i})
			body := reqs[len(reqs)-1].Body
			if format == provider.Anthropic {
				// The generated Anthropic session starts every person's
				// message in the user message that answers the last call,
				// so no turn ends cleanly: a conversation whose turns end
				// with the assistant's words.
				body = anthropicTurns(12, 600)
			}
			resp := g.post(reqs[0].Path, body, cred, "anthropic-version: 2023-06-01")
			if resp.Status != 200 {
				t.Fatalf("status %d: %s", resp.Status, resp.Body)
			}
			folds := foldIDRE.FindAllSubmatch(up.last(t).Body, -1)
			if len(folds) == 0 {
				t.Fatalf("the request went upstream without a folded turn (%s)", resp.TT)
			}
			var list struct {
				Messages []json.RawMessage `json:"messages"`
				Input    []json.RawMessage `json:"input"`
			}
			if err := json.Unmarshal(body, &list); err != nil {
				t.Fatal(err)
			}
			msgs := append(list.Messages, list.Input...)
			for _, f := range folds {
				id, n := string(f[1]), atoi(t, string(f[2]))
				content, page := recoverAll(t, g, id, cred)
				var got []json.RawMessage
				if err := json.Unmarshal([]byte(content), &got); err != nil {
					t.Fatalf("%s: the recovered turn is not JSON: %v\n%.200s", id, err, content)
				}
				if len(got) != n || !isRun(got, msgs) {
					t.Fatalf("%s: %d recovered messages are not the turn's %d messages as sent", id, len(got), n)
				}
				sum := sha256.Sum256([]byte(content))
				if page.TotalChars != utf8.RuneCountInString(content) || page.SHA256 != hex.EncodeToString(sum[:]) {
					t.Fatalf("%s: total_chars %d, sha256 %s do not describe the content (%d chars)", id, page.TotalChars, page.SHA256, utf8.RuneCountInString(content))
				}
			}
		})
	}
}

// recoverAll pages through an artifact with the API and returns its
// content and last page.
func recoverAll(t *testing.T, g *gateway, id, cred string) (string, recovery.Page) {
	t.Helper()
	var content bytes.Buffer
	var p recovery.Page
	for next := 0; ; {
		r := g.do("GET", recovery.DefaultPath+"artifacts/"+id+"?limit=7000&offset="+strconv.Itoa(next), nil, 0, cred)
		if r.Status != 200 {
			t.Fatalf("%s: status %d %s", id, r.Status, r.Body)
		}
		p = recovery.Page{}
		if err := json.Unmarshal(r.Body, &p); err != nil {
			t.Fatal(err)
		}
		content.WriteString(p.Content)
		if p.NextOffset == nil {
			return content.String(), p
		}
		next = *p.NextOffset
	}
}

// isRun reports whether got is, byte for byte, a run of consecutive
// elements of msgs.
func isRun(got, msgs []json.RawMessage) bool {
	for s := 0; s+len(got) <= len(msgs); s++ {
		ok := true
		for k := range got {
			if !bytes.Equal(got[k], msgs[s+k]) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// anthropicTurns is an Anthropic conversation of n turns, each a person's
// question, a tool call, its result of size characters and the assistant's
// answer.
func anthropicTurns(n, size int) []byte {
	var msgs []any
	for t := 0; t < n; t++ {
		id := fmt.Sprintf("toolu_%02d", t)
		msgs = append(msgs,
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": fmt.Sprintf("Question %d: what does module %d do?", t, t)}}},
			map[string]any{"role": "assistant", "content": []any{
				map[string]any{"type": "tool_use", "id": id, "name": "Read", "input": map[string]any{"file_path": fmt.Sprintf("/src/m%d.py", t)}}}},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": id,
				"content": fixtures.ToolOutput(7000+t, size)}}},
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": fmt.Sprintf("Module %d reads its configuration.", t)}}})
	}
	msgs = append(msgs, map[string]any{"role": "user", "content": "Thanks, go on."})
	b, _ := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": msgs})
	return b
}
