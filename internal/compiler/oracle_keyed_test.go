package compiler_test

import (
	"bytes"
	"context"
	"regexp"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// The oracle's keyed mode accepts receipts whose ids are a consistent
// renaming of the content ids, and refuses one id for two contents and a
// sha256 field that is not the id's prefix; the strict mode refuses any
// renaming.
func TestCheckRewriteKeyed(t *testing.T) {
	c, err := compiler.New(compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	const path = "/v1/chat/completions"
	turns := fixtures.Turns(9100, 3, 9000)
	sc := artifact.Scope{Tenant: "t"}
	c.Compile(context.Background(), compiler.Request{Path: path, Body: fixtures.ChatBody("gpt-4o", turns[:2], ""), Scope: sc, Mode: compiler.ModeEnforce})
	body := fixtures.ChatBody("gpt-4o", turns, "")
	res := c.Compile(context.Background(), compiler.Request{Path: path, Body: body, Scope: sc, Mode: compiler.ModeEnforce})
	ids := regexp.MustCompile(`a_([0-9a-f]{32}) \|[^\]]*sha256=([0-9a-f]{16})`).FindAllSubmatch(res.Body, -1)
	if res.Receipts != 2 || len(ids) != 2 || bytes.Equal(ids[0][1], ids[1][1]) {
		t.Fatalf("setup: %d receipts (%s), ids %q", res.Receipts, res.Reason, ids)
	}
	rename := func(out []byte, i int, id string) []byte {
		out = bytes.Replace(out, ids[i][1], []byte(id), -1)
		return bytes.Replace(out, ids[i][2], []byte(id[:16]), -1)
	}
	a, b := "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	cases := []struct {
		name          string
		out           []byte
		strict, keyed bool
	}{
		{"as compiled", res.Body, true, true},
		{"renamed consistently", rename(rename(res.Body, 0, a), 1, b), false, true},
		{"one id for two contents", rename(rename(res.Body, 0, a), 1, a), false, false},
		{"sha256 not the id's prefix", bytes.Replace(rename(res.Body, 0, a), []byte("sha256="+a[:16]), []byte("sha256="+b[:16]), 1), false, false},
	}
	for _, c := range cases {
		if err := compiler.CheckRewrite(path, body, c.out); (err == nil) != c.strict {
			t.Errorf("%s: CheckRewrite = %v", c.name, err)
		}
		if err := compiler.CheckRewriteKeyed(path, body, c.out); (err == nil) != c.keyed {
			t.Errorf("%s: CheckRewriteKeyed = %v", c.name, err)
		}
	}
}
