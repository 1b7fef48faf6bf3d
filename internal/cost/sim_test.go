package cost

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestRender(t *testing.T) {
	body := `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}]}],"system":[{"type":"text","text":"S"}],"tools":[{"name":"bash"}],"model":"m"}`
	r := Render("anthropic_messages", []byte(body))
	want := `[{"name":"bash"}][{"type":"text","text":"S"}]{"role":"user","content":"hi"}{"role":"assistant","content":[{"type":"text","text":"x"}]}`
	if string(r.Bytes) != want {
		t.Fatalf("render:\n%s\nwant\n%s", r.Bytes, want)
	}
	if len(r.Breakpoints) != 1 || r.Breakpoints[0] != len(want) || r.OneHour {
		t.Fatalf("breakpoints %v", r.Breakpoints)
	}
	// A marker first in its object, as encoding/json sorts keys, leaves the
	// same bytes as no marker.
	first := Render("anthropic_messages", []byte(`{"messages":[{"content":[{"cache_control":{"type":"ephemeral"},"text":"x","type":"text"}],"role":"user"}]}`))
	plain := Render("anthropic_messages", []byte(`{"messages":[{"content":[{"text":"x","type":"text"}],"role":"user"}]}`))
	if !bytes.Equal(first.Bytes, plain.Bytes) || len(first.Breakpoints) != 1 || len(plain.Breakpoints) != 0 {
		t.Fatalf("marker first: %s vs %s", first.Bytes, plain.Bytes)
	}
	resp := Render("openai_responses", []byte(`{"instructions":"I","input":[{"role":"user","content":"a"}],"tools":[]}`))
	if string(resp.Bytes) != `[]"I"{"role":"user","content":"a"}` {
		t.Fatalf("responses: %s", resp.Bytes)
	}
	if odd := Render("openai_chat", []byte(`[1]`)); string(odd.Bytes) != `[1]` {
		t.Fatalf("odd body: %s", odd.Bytes)
	}
}

// A hand-computed three-step session at 1 byte per token, minimum prefix
// 4 tokens, breakpoint after every step's newest segment:
//
//	step 1 "AAAA" + "BBBB"        : nothing cached, 8 written at 1.25     = 10
//	step 2 "AAAA" + "BBBB" + "CC" : 8 read at 0.1, 2 written              = 0.8 + 2.5 = 3.3
//	step 3 after an idle gap past the TTL: all 12 written                  = 15
//
// OpenAI (granularity 4, min prefix 4, free writes): step 2 reads 8, writes
// 2: 0.8 + 2 = 2.8; a step changing the first byte reads nothing.
func TestSimulatorThreeSteps(t *testing.T) {
	cfg := Config{BytesPerToken: 1}
	an := cfg.Model("anthropic_messages", "claude")
	an.MinPrefix = 4
	s := Simulator{Model: an, Config: cfg}
	t0 := time.Unix(1000, 0)
	steps := []struct {
		r    Rendered
		at   time.Time
		want Bill
	}{
		{Rendered{Bytes: []byte("AAAABBBB"), Breakpoints: []int{8}}, t0, Bill{Tokens: 8, Written: 8, Cost: 10}},
		{Rendered{Bytes: []byte("AAAABBBBCC"), Breakpoints: []int{10}}, t0.Add(time.Minute), Bill{Tokens: 10, Read: 8, Written: 2, Cost: 3.3}},
		{Rendered{Bytes: []byte("AAAABBBBCCDD"), Breakpoints: []int{12}}, t0.Add(10 * time.Minute), Bill{Tokens: 12, Written: 12, Cost: 15}},
	}
	total := 0.0
	for i, st := range steps {
		got := s.Step(st.r, st.at)
		if !near(got.Cost, st.want.Cost) || !near(got.Read, st.want.Read) || !near(got.Written, st.want.Written) || got.Tokens != st.want.Tokens {
			t.Errorf("anthropic step %d: %+v, want %+v", i+1, got, st.want)
		}
		total += got.Cost
	}
	if !near(total, 28.3) {
		t.Errorf("session %v, want 28.3", total)
	}
	// Without a breakpoint Anthropic caches nothing: plain input.
	if b := s.Step(Rendered{Bytes: []byte("AAAABBBBCCDD")}, t0.Add(11*time.Minute)); b.Cost != 12 || b.Plain != 12 {
		t.Errorf("no breakpoint: %+v", b)
	}
	// Content after the last breakpoint is plain input, not a write.
	s2 := Simulator{Model: an, Config: cfg}
	if b := s2.Step(Rendered{Bytes: []byte("AAAABBBB"), Breakpoints: []int{4}}, t0); !near(b.Cost, 4*1.25+4) {
		t.Errorf("after the breakpoint: %+v", b)
	}

	oa := cfg.Model("openai_chat", "gpt-5")
	oa.MinPrefix, oa.Granularity = 4, 4
	so := Simulator{Model: oa, Config: cfg}
	if b := so.Step(Rendered{Bytes: []byte("AAAABBBBC")}, t0); b.Cost != 9 {
		t.Errorf("openai step 1: %+v", b)
	}
	if b := so.Step(Rendered{Bytes: []byte("AAAABBBBCCC")}, t0.Add(time.Minute)); !near(b.Cost, 0.8+3) || b.Read != 8 {
		t.Errorf("openai step 2 (9 shared bytes, 8 in whole blocks): %+v", b)
	}
	// Automatic caching reads any common prefix of an earlier prompt.
	if b := so.Step(Rendered{Bytes: []byte("AAAABBBZZZZZ")}, t0.Add(2*time.Minute)); !near(b.Cost, 0.4+8) || b.Read != 4 {
		t.Errorf("openai, partial prefix (7 shared bytes, 4 in whole blocks): %+v", b)
	}
	if b := so.Step(Rendered{Bytes: []byte("XAAABBBBCCC")}, t0.Add(3*time.Minute)); b.Cost != 11 {
		t.Errorf("openai, first byte changed: %+v", b)
	}
}

func TestSimulatorKeepsEntriesBounded(t *testing.T) {
	cfg := Config{BytesPerToken: 1}
	oa := cfg.Model("openai_chat", "gpt-5")
	oa.MinPrefix, oa.Granularity = 1, 1
	s := Simulator{Model: oa, Config: cfg}
	t0 := time.Unix(0, 0)
	for i := range 3 * maxEntries {
		s.Step(Rendered{Bytes: bytes.Repeat([]byte(strings.Repeat("x", i%7+1)), i+1)}, t0)
	}
	if len(s.entries) > maxEntries {
		t.Fatalf("%d entries", len(s.entries))
	}
}
