package compiler

import "testing"

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
// even one that carries no receipt or fold; one never sent it does not.
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
		p := &plan{d: d.doc, lineage: Lineage{Cache: (&cacheState{tool: sent}).encode()}}
		tp := c.planTool(f.name(), p)
		if (tp.def != nil) != sent || tp.sticky != sent {
			t.Fatalf("sent before=%v: planTool = %+v", sent, tp)
		}
		if !sent {
			continue
		}
		p.edits = nil
		out, err := addTool(f, p, src, tp.def, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"tools":[` + string(def) + `]}`
		if string(out) != want {
			t.Fatalf("got %s\nwant %s", out, want)
		}
	}
}
