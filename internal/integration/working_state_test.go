package integration

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// TestWorkingState_EndToEnd replays a generated session of each format
// through Caddy with working_state_chars set. Every body the provider gets
// passes the checker; it carries at most one block, at its end; every id
// the block lists is named by a receipt or summary of the same body (so it
// was made durable first); and a step whose rewrite names artifacts and
// ends with a user message carries one.
func TestWorkingState_EndToEnd(t *testing.T) {
	idRE := regexp.MustCompile(`- (a_[0-9a-f]{32}) tool=`)
	for _, format := range []provider.Format{provider.Chat, provider.Responses, provider.Anthropic} {
		t.Run(string(format), func(t *testing.T) {
			up := newUpstream(t)
			g := startGateway(t, `
	token_terminator {
		vault_dir $VAULT
		working_state_chars 1500
	}
	reverse_proxy $UPSTREAM
`, up)
			reqs := fixtures.Session(fixtures.SessionOptions{Format: format, Steps: 14, PersonTurns: 4, OutputChars: 9000, ReReadEvery: 3, Seed: 31})
			// The generated steps all end with a tool result; a person's next
			// message ends the last one with a user message, as a client
			// sends it at the start of a turn.
			last := reqs[len(reqs)-1]
			reqs = append(reqs, fixtures.CorpusRequest{Path: last.Path, Body: withPersonMessage(t, format, last.Body, "Now run the whole test suite.")})
			blocks := 0
			for i, r := range reqs {
				resp := g.post(r.Path, r.Body)
				if resp.Status != 200 {
					t.Fatalf("step %d: status %d", i, resp.Status)
				}
				sent := up.last(t).Body
				if err := compiler.CheckCompactedKeyed(r.Path, r.Body, sent); err != nil {
					t.Fatalf("step %d: checker: %v", i, err)
				}
				n := bytes.Count(sent, []byte("<working_state>"))
				if n > 1 {
					t.Fatalf("step %d: %d blocks", i, n)
				}
				if n == 0 {
					if i == len(reqs)-1 {
						t.Fatalf("the person's message (%s): no block", resp.TT)
					}
					continue
				}
				blocks++
				without := compiler.WithoutWorkingState(r.Path, sent)
				if bytes.Equal(without, sent) {
					t.Fatalf("step %d: the block is not where the checker allows it", i)
				}
				i0 := bytes.Index(sent, []byte("<working_state>"))
				for _, m := range idRE.FindAllSubmatch(sent[i0:], -1) {
					if !bytes.Contains(without, m[1][2:]) {
						t.Fatalf("step %d: block lists %s, which the rewrite does not name", i, m[1])
					}
				}
			}
			if blocks == 0 {
				t.Fatalf("%d steps, no block", len(reqs))
			}
			t.Logf("%s: %d of %d steps carried a block", format, blocks, len(reqs))
		})
	}
}

// withPersonMessage appends a person's message to a request's history (a
// test original, re-encoded by encoding/json as the fixtures are).
func withPersonMessage(t *testing.T, format provider.Format, body []byte, text string) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	key := "messages"
	if format == "openai_responses" {
		key = "input"
	}
	m[key] = append(m[key].([]any), map[string]any{"role": "user", "content": text})
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
