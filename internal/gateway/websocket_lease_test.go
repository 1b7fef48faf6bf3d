package gateway

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
)

// TestWebSocketHeldInline: a continuation is compiled with what its chain
// holds inline (compiler.Request.HeldInline): the Result.Inline of the
// message that opened the chain and of each continuation since, the
// newest first; a message that opens a chain (no previous_response_id),
// or names a response the socket does not remember, starts anew.
func TestWebSocketHeldInline(t *testing.T) {
	steps := []struct {
		id, prev string
		inline   []int // the message's Result.Inline (digestN)
		want     []int // its Request.HeldInline
	}{
		{id: "r1", inline: []int{1}},
		{id: "r2", prev: "r1", inline: []int{2}, want: []int{1}},
		{id: "r3", prev: "r2", want: []int{2, 1}},
		{id: "r4", prev: "r3", inline: []int{1, 3}, want: []int{2, 1}},
		{id: "r5", inline: []int{4}},
		{id: "r6", prev: "r5", want: []int{4}},
		{id: "r7", prev: "r4", want: []int{1, 3, 2}},
		{id: "r8", prev: "r9"},
	}
	w := newWSTest(t, nil)
	inner := wsCompiler(&w.commits).fn
	var held [][]artifact.Digest
	w.h.Compile = func(ctx context.Context, req compiler.Request) compiler.Result {
		held = append(held, req.HeldInline)
		var v struct{ Inline []int }
		_ = json.Unmarshal(req.Body, &v)
		res := inner(ctx, req)
		for _, n := range v.Inline {
			res.Inline = append(res.Inline, digestN(n))
		}
		return res
	}
	for i, st := range steps {
		body := wsMessageBody("a", st.prev)
		js, _ := json.Marshal(st.inline)
		body = body[:len(body)-1] + `,"inline":` + string(js) + `}`
		w.relay(t, body)
		w.answer(st.id, completed(st.id))
		var want []artifact.Digest
		for _, n := range st.want {
			want = append(want, digestN(n))
		}
		if got := held[i]; !slices.Equal(got, want) {
			t.Fatalf("message %s: held inline %v, want %v", st.id, got, want)
		}
	}
}

// A chain holds at most wsReachMax digests inline, the newest kept.
func TestWebSocketHeldInlineBounded(t *testing.T) {
	m := &wsMessage{heldInline: digestsN(0, wsReachMax)}
	got := chainInline(m, compiler.Result{Inline: digestsN(wsReachMax, wsReachMax+2)})
	if len(got) != wsReachMax || got[0] != digestN(wsReachMax) || got[1] != digestN(wsReachMax+1) || got[2] != digestN(0) {
		t.Fatalf("%d digests, first %v", len(got), got[:3])
	}
}
