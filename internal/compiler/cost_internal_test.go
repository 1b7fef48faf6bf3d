package compiler

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
)

// The third veto by hand, gpt-5 (read 0.1, write 1, 128-token blocks, min
// 1024), horizon 1, 4 bytes per token. Original: 40000 bytes = 10000
// tokens, 36000 bytes cached = 9000 tokens (70 whole blocks = 8960):
// 896 + 1040 now, 0.1*9984 later (9984 in whole blocks) + 16 unblocked =
// 1936 + 998.4 + 16 = 2950.4. Rewrite: 20000 bytes = 5000 tokens, nothing
// cached: 5000 + 0.1*4992 + 8 = 5507.2 > 2950.4: vetoed. With the token
// counts measured, a rewrite that is 2x denser in tokens is judged by
// them.
func TestCheaperVeto(t *testing.T) {
	var cfg cost.Config
	ch := &choice{model: cfg.Model("openai_chat", "gpt-5"), horizon: 1, tpb: cfg.Tokens(1),
		orig: costPlan{total: 40000, cached: 36000}, sent: costPlan{total: 20000}}
	if got := ch.expected(ch.orig, ch.tpb); math.Abs(got-2950.4) > 1e-6 {
		t.Fatalf("expected(orig) = %v", got)
	}
	if got := ch.expected(ch.sent, ch.tpb); math.Abs(got-5507.2) > 1e-6 {
		t.Fatalf("expected(sent) = %v", got)
	}
	var res Result
	if ch.cheaper(&res, 40000, 20000) {
		t.Fatal("a rewrite of the warm prefix passed the veto")
	}
	// Cold: the same rewrite is cheaper (original 10000 + 998.4 + 16).
	ch.orig.cached = 0
	if !ch.cheaper(&res, 40000, 20000) {
		t.Fatal("cold: vetoed")
	}
	// Measured tokens: 10000 raw, 9999 sent (the receipts are dense): the
	// rewrite saves one token but costs as much to write: 9999 + 0.1*9984
	// + 15 = 11012.4 vs 11014.4 — still cheaper, barely; at 10001 it is not.
	res.Tokens = TokenReport{Status: artifact.TokensExact, Raw: 10000, Sent: 9999}
	if !ch.cheaper(&res, 40000, 20000) {
		t.Fatal("measured, cheaper by two: vetoed")
	}
	res.Tokens.Sent = 10001
	if ch.cheaper(&res, 40000, 20000) {
		t.Fatal("measured, dearer: passed")
	}
}

func TestCacheStateRoundTrip(t *testing.T) {
	s := cacheState{steps: 7, at: 1234567890, aligned: -1, head: 42,
		segs: []seg{{fp: 1, end: 10}, {fp: 2, end: 25}, {fp: 3, end: 25}}, receipted: []uint64{5, 9}}
	b := s.encode()
	got, err := parseCacheState(b)
	if err != nil || got.steps != 7 || got.at != s.at || got.aligned != -1 || got.head != 42 ||
		len(got.segs) != 3 || got.segs[1] != s.segs[1] || got.segs[2] != s.segs[2] || len(got.receipted) != 2 || got.receipted[1] != 9 {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if !got.wasReceipted(artifact.Digest{9}) || got.wasReceipted(artifact.Digest{6}) {
		t.Fatal("wasReceipted")
	}
	for _, bad := range [][]byte{nil, {2}, b[:len(b)-1], append(b[:len(b):len(b)], 0)} {
		if decodeCacheState(bad) != nil {
			t.Errorf("%x accepted", bad)
		}
	}
}

// The breakpoints survive the encoding; a version 1 state (no breakpoint
// list) still reads, as automatic caching; a breakpoint past the segments
// is refused.
func TestCacheStateBreakpoints(t *testing.T) {
	s := cacheState{steps: 2, at: 5, aligned: 4, head: 9, segs: []seg{{fp: 1, end: 10}, {fp: 2, end: 20}, {fp: 3, end: 30}, {fp: 4, end: 40}},
		bps: []bool{true, false, false, true}, tool: true, older: []entryRef{{fp: 77, at: 3}, {fp: 78, at: -4}}}
	got, err := parseCacheState(s.encode())
	if err != nil || !slices.Equal(got.bps, s.bps) || !got.tool || len(got.segs) != 4 || !slices.Equal(got.older, s.older) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	none := cacheState{steps: 2, segs: s.segs}
	b := none.encode()
	if got, err := parseCacheState(b); err != nil || got.bps != nil {
		t.Fatalf("no breakpoints: %+v, %v", got, err)
	}
	// Version 1 is version 2 without the breakpoint and entry counts.
	v1 := append([]byte{cacheStateV1}, b[1:len(b)-2]...)
	if got, err := parseCacheState(v1); err != nil || got.bps != nil || len(got.segs) != 4 {
		t.Fatalf("version 1: %+v, %v", got, err)
	}
	bad := append(b[:len(b)-2:len(b)-2], 1, 4, 0) // one breakpoint, at segment 4 of 0..3
	if _, err := parseCacheState(bad); err == nil {
		t.Fatal("a breakpoint past the segments was accepted")
	}
}

// cachedPrefix: automatic caching holds the longest common prefix of
// segments; with breakpoints only up to the last common segment where the
// previous prompt had one.
func TestCachedPrefixBreakpoints(t *testing.T) {
	prev := []seg{{fp: 1, end: 100}, {fp: 2, end: 300}, {fp: 3, end: 600}, {fp: 4, end: 900}}
	cur := []seg{{fp: 1, end: 100}, {fp: 2, end: 300}, {fp: 3, end: 600}, {fp: 5, end: 700}, {fp: 6, end: 800}}
	for _, tt := range []struct {
		name string
		bps  []bool
		want int
	}{
		{"automatic", nil, 600},
		{"system and newest", []bool{true, false, false, true}, 100},
		{"two moving", []bool{true, false, true, true}, 600},
		{"none common", []bool{false, false, false, true}, 0},
	} {
		if got := cachedPrefix(prev, tt.bps, cur); got != tt.want {
			t.Errorf("%s: cachedPrefix = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func FuzzCacheState(f *testing.F) {
	f.Add((&cacheState{steps: 1, segs: []seg{{1, 2}}}).encode())
	f.Add((&cacheState{steps: 1, segs: []seg{{1, 2}, {3, 4}}, bps: []bool{false, true}}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parseCacheState(b)
		if err != nil {
			return
		}
		again, err := parseCacheState(s.encode())
		if err != nil || again.steps != s.steps || len(again.segs) != len(s.segs) || len(again.receipted) != len(s.receipted) ||
			!slices.Equal(again.bps, s.bps) || !slices.Equal(again.older, s.older) {
			t.Fatalf("re-encoding changed the state: %v", err)
		}
	})
}

// With breakpoints, an earlier prompt's entry that the TTL has not expired
// is read even where the last prompt's own entry no longer matches (a
// client that appended to the message holding its breakpoint); the
// recorded entries keep the live ones, refresh those read, drop expired
// ones and the new prompt's own breakpoints.
func TestOlderBreakpointEntries(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var cfg cost.Config
	m := cfg.Model("anthropic_messages", "claude-sonnet-4-5")
	prev := &cacheState{at: now.Add(-time.Minute).UnixNano(),
		segs:  []seg{{fp: 1, end: 100}, {fp: 2, end: 300}, {fp: 30, end: 600}},
		bps:   []bool{true, false, true},
		older: []entryRef{{fp: 2, at: now.Add(-2 * time.Minute).UnixNano()}, {fp: 9, at: now.Add(-time.Hour).UnixNano()}}}
	ch := &choice{model: m, now: now, prev: prev, warm: true, marked: []bool{true}}
	cur := []seg{{fp: 1, end: 100}, {fp: 2, end: 300}, {fp: 3, end: 650}, {fp: 4, end: 900}}
	if got := ch.costOf(cur).cached; got != 300 {
		t.Fatalf("cached %d, want 300 (the older entry at segment 2)", got)
	}
	expired := *prev
	expired.older = []entryRef{{fp: 2, at: now.Add(-10 * time.Minute).UnixNano()}}
	ch.prev = &expired
	if got := ch.costOf(cur).cached; got != 100 {
		t.Fatalf("expired entry read: cached %d, want 100", got)
	}
	ch.prev = prev
	got := ch.olderEntries(cur, []bool{true, false, false, true})
	// fp 1 is the new prompt's own breakpoint; fp 9 expired; fp 2 was read
	// (refreshed to now); fp 30, the last prompt's newest entry, is kept.
	want := []entryRef{{fp: 2, at: now.UnixNano()}, {fp: 30, at: prev.at}}
	if !slices.Equal(got, want) {
		t.Fatalf("older entries %+v, want %+v", got, want)
	}
}
