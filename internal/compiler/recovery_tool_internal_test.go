package compiler

import (
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// The sticky flag survives the cache state's encoding, and a state
// recorded before the flag existed reads as not sent.
func TestCacheStateToolFlag(t *testing.T) {
	for _, tool := range []bool{false, true} {
		st := cacheState{steps: 3, at: 42, aligned: 2, head: 7, segs: []seg{{1, 10}, {2, 30}}, receipted: []uint64{5}, tool: tool}
		b := st.encode()
		got, err := parseCacheState(b)
		if err != nil || got.tool != tool || got.steps != 3 || len(got.receipted) != 1 {
			t.Fatalf("tool=%v: round trip gave %+v, %v", tool, got, err)
		}
		if toolSent(b) != tool {
			t.Fatalf("toolSent(%v state) = %v", tool, !tool)
		}
	}
	if toolSent(nil) {
		t.Fatal("no state reads as sent")
	}
	bad := append((&cacheState{tool: true}).encode(), 1)
	if _, err := parseCacheState(bad); err == nil {
		t.Fatal("a trailing byte after the flag was accepted")
	}
}

// A conversation that was sent the tool gets it with any later rewrite,
// even one that carries no receipt or fold; one never sent it does not;
// and a plan without edits (it goes out as the original) carries none.
func TestPlanToolSticky(t *testing.T) {
	def := []byte(`{"name":"token_terminator","input_schema":{"type":"object"}}`)
	c := &Compiler{opts: Options{Recovery: Recovery{ToolName: "token_terminator", Tools: ToolDefinitions{Anthropic: string(def)}}}}
	f := formatFor("POST", "/v1/messages")
	src := []byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`)
	d, reason := parseDoc(f, src, nil)
	if reason != "" {
		t.Fatal(reason)
	}
	for _, sent := range []bool{false, true} {
		p := &plan{d: d.doc, lineage: artifact.Lineage{Cache: (&cacheState{tool: sent}).encode()}, recovery: c.opts.Recovery.forDoc(d.doc)}
		if tp := c.planTool(f.name(), p); tp.def != nil {
			t.Fatalf("sent before=%v: a plan without edits carries the tool", sent)
		}
		p.edits = []edit{{start: 2, end: 2}} // a rewrite without receipts or folds
		tp := c.planTool(f.name(), p)
		if (tp.def != nil) != sent || tp.sticky != sent {
			t.Fatalf("sent before=%v: planTool = %+v", sent, tp)
		}
		if !sent {
			continue
		}
		p.edits = nil
		out, err := addTool(src, d.root, tp.def)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":[` + string(def) + `]}`
		if string(out) != want {
			t.Fatalf("got %s\nwant %s", out, want)
		}
	}
}

// The recovered digests survive the encoding next to the tool flag; a
// malformed recovery part is refused.
func TestCacheStateRecovered(t *testing.T) {
	st := cacheState{steps: 2, aligned: 0, segs: []seg{{1, 10}}, tool: true, recovered: []uint64{3, 9}}
	got, err := parseCacheState(st.encode())
	if err != nil || !got.tool || len(got.recovered) != 2 || got.recovered[1] != 9 {
		t.Fatalf("round trip gave %+v, %v", got, err)
	}
	base := (&cacheState{}).encode()
	for name, tail := range map[string][]byte{
		"unknown flag":   {4},
		"zero flags":     {0},
		"count too long": {stateRecovered, 3, 1, 2, 3, 4, 5, 6, 7, 8},
		"empty list":     {stateRecovered, 0},
	} {
		if _, err := parseCacheState(append(append([]byte{}, base...), tail...)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// withTool prices the tool's appearance: against a state recorded without
// it the prompt is written again (but for the client's tools without
// breakpoints), while the decision judges the first appearance as paid;
// once sticky, the plan with the tool keeps its prefix and the original
// (no tool) loses it.
func TestWithToolPrices(t *testing.T) {
	def := []byte(`{"name":"token_terminator","input_schema":{"type":"object"}}`)
	f := formatFor("POST", "/v1/messages")
	src := []byte(`{"model":"m","max_tokens":1,"tools":[{"name":"bash","input_schema":{}}],"messages":[{"role":"user","content":"hi"}]}`)
	d, reason := parseDoc(f, src, nil)
	if reason != "" {
		t.Fatal(reason)
	}
	ins := len(toolInsert(d.doc, def).repl)
	segs := []seg{{fp: 1, end: 100}, {fp: 2, end: 300}, {fp: 3, end: 400}}
	for _, breakpoints := range []bool{true, false} {
		ch := &choice{warm: true, prev: &cacheState{segs: segs}}
		ch.model.Breakpoints = breakpoints
		keptTools := 0
		if !breakpoints {
			keptTools = 99
		}
		first := &plan{d: d.doc, tool: toolPlan{def: def}}
		held, judged, billed := ch.withTool(first, append([]seg{}, segs...))
		if billed.total != 400+ins || billed.cached != keptTools {
			t.Fatalf("breakpoints=%v: first appearance billed %+v, want total %d cached %d", breakpoints, billed, 400+ins, keptTools)
		}
		if judged.total != 400+ins || judged.cached != 400 {
			t.Fatalf("breakpoints=%v: first appearance judged %+v", breakpoints, judged)
		}
		// The next request of the now sticky conversation.
		ch.prev = &cacheState{segs: held, tool: true}
		sticky := &plan{d: d.doc, tool: toolPlan{def: def, sticky: true}}
		_, judged, billed = ch.withTool(sticky, append([]seg{}, segs...))
		if billed != judged || billed.cached != 400+ins {
			t.Fatalf("breakpoints=%v: sticky judged %+v billed %+v, want all %d cached", breakpoints, judged, billed, 400+ins)
		}
		wantOrig := 0 // the original loses the prefix, but for the client's tools without breakpoints
		if !breakpoints {
			wantOrig = 100
		}
		if orig := ch.costOf(segs); orig.cached != wantOrig {
			t.Fatalf("breakpoints=%v: the original (no tool) keeps %d cached bytes, want %d", breakpoints, orig.cached, wantOrig)
		}
	}
}
