package main

import (
	"bytes"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/compiler"
	"github.com/tokenterminator/caddy-token-terminator/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/tokens"
)

func TestCacheCost(t *testing.T) {
	tests := []struct {
		prev, cur string
		want      float64
	}{
		{"", "abcd", 5},             // all written
		{"abcd", "abcd", 0.4},       // all read
		{"abcd", "abXY", 0.2 + 2.5}, // 2 read, 2 written
		{"abcdef", "ab", 0.2},
	}
	for _, tt := range tests {
		if got := compilertest.CacheCost([]byte(tt.prev), []byte(tt.cur)); got < tt.want-1e-9 || got > tt.want+1e-9 {
			t.Errorf("CacheCost(%q, %q) = %v, want %v", tt.prev, tt.cur, got, tt.want)
		}
	}
}

// A generated agent session: every step resends the history and adds a
// tool round. The replay must shrink it, keep every body valid, and make it
// cheaper under prefix caching.
func TestReplayGeneratedSession(t *testing.T) {
	turns := compilertest.Turns(7, 12, 9000)
	var steps []compilertest.CorpusRequest
	for i := 1; i <= len(turns); i++ {
		steps = append(steps, compilertest.CorpusRequest{Path: "/v1/chat/completions", Body: compilertest.ChatBody("gpt-4o", turns[:i], "")})
	}
	c, err := compiler.New(DefaultOptions(), compilertest.NewMemStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := tokens.New(tokens.Config{Budget: 1 << 62})
	if err != nil {
		t.Fatal(err)
	}
	r := Replay(c, tc, compilertest.CorpusFile{Name: "generated", Format: "openai_chat", Steps: true, Requests: steps})
	if r.Invalid != 0 || r.Accepted != len(steps)-1 || r.Receipts != 11*12/2 {
		t.Fatalf("invalid %d accepted %d receipts %d", r.Invalid, r.Accepted, r.Receipts)
	}
	if r.Sent >= r.Raw || r.SentCost >= r.RawCost {
		t.Fatalf("not smaller or not cheaper: bytes %d -> %d, cost %.0f -> %.0f", r.Raw, r.Sent, r.RawCost, r.SentCost)
	}
	if !r.Tokens || r.SentTokens >= r.RawTokens || r.SentTokCost >= r.RawTokCost {
		t.Fatalf("tokens: %v %d -> %d", r.Tokens, r.RawTokens, r.SentTokens)
	}
	var out bytes.Buffer
	Print(&out, []Row{r})
	if !bytes.Contains(out.Bytes(), []byte("| generated | openai_chat | 12 |")) {
		t.Fatalf("table:\n%s", out.String())
	}
}
