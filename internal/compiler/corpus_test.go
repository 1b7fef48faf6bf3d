package compiler_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// TestCorpus replays every body of the shared corpus (../shared/corpus)
// through the compiler with a fresh in-memory vault per file, steps in
// order: every forwarded body must pass the oracle (assertSpliced, the
// validity check, receipts only in slots), a retry must compile to the
// same bytes, and no rewrite may be refused by the checker. It logs the
// per-file reduction table.
func TestCorpus(t *testing.T) {
	files := compilertest.Corpus(t)
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-80s %-18s %5s %10s %10s %7s %8s\n", "file", "format", "reqs", "raw", "sent", "red%", "receipts")
	var totRaw, totSent, totRec int
	for _, f := range files {
		// The gateway's defaults: min 8000 chars, one inline lease.
		c := newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
		var raw, sent, rec int
		for i, r := range f.Requests {
			res := compileAt(c, r.Path, "corpus", r.Body)
			if res.Reason == compiler.ReasonPanic || res.Reason == compiler.ReasonInternal || res.Reason == compiler.ReasonInvalidOutput {
				t.Fatalf("%s step %d: %s", f.Name, i, res.Reason)
			}
			assertValidRewrite(t, r.Path, r.Body, res)
			if again := compileAt(c, r.Path, "corpus", r.Body); !bytes.Equal(again.Body, res.Body) {
				t.Fatalf("%s step %d: retry compiled differently", f.Name, i)
			}
			raw, sent, rec = raw+len(r.Body), sent+len(res.Body), rec+res.Receipts
		}
		if n := c.InvalidOutputs(); n != 0 {
			t.Fatalf("%s: %d rewrites refused by the checker", f.Name, n)
		}
		fmt.Fprintf(&table, "%-80s %-18s %5d %10d %10d %6.1f%% %8d\n", f.Name, f.Format, len(f.Requests), raw, sent, fixtures.Reduction(raw, sent), rec)
		totRaw, totSent, totRec = totRaw+raw, totSent+sent, totRec+rec
	}
	fmt.Fprintf(&table, "%-80s %-18s %5s %10d %10d %6.1f%% %8d\n", "total", "", "", totRaw, totSent, fixtures.Reduction(totRaw, totSent), totRec)
	t.Log(table.String())
}

// TestCorpusDerivedSessions replays each last-step file as the session that
// led to it: the request after every run of tool results, i.e. prefixes of
// its history (re-encoded with encoding/json, the same way at every step).
// These sessions are derived, not captured; they show what leases would do
// over the real tool outputs of files that have no steps. Same oracle as
// TestCorpus.
func TestCorpusDerivedSessions(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("derived sessions (100 MB of bodies) skipped in -short mode and under -race")
	}
	files := compilertest.Corpus(t)
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-80s %-18s %5s %10s %10s %7s %8s\n", "derived from", "format", "steps", "raw", "sent", "red%", "receipts")
	var totRaw, totSent, totRec int
	for _, f := range files {
		if f.Steps || f.Format == "mixed" {
			continue
		}
		r := f.Requests[0]
		steps := derivedSteps(t, f.Format, r.Body)
		c := newCompiler(t, compiler.Options{InlineLeases: 1}, compilertest.NewMemStore(), nil)
		var raw, sent, rec int
		for i, body := range steps {
			res := compileAt(c, r.Path, "corpus", body)
			if res.Reason == compiler.ReasonPanic || res.Reason == compiler.ReasonInternal || res.Reason == compiler.ReasonInvalidOutput {
				t.Fatalf("%s step %d: %s", f.Name, i, res.Reason)
			}
			assertValidRewrite(t, r.Path, body, res)
			raw, sent, rec = raw+len(body), sent+len(res.Body), rec+res.Receipts
		}
		fmt.Fprintf(&table, "%-80s %-18s %5d %10d %10d %6.1f%% %8d\n", f.Name, f.Format, len(steps), raw, sent, fixtures.Reduction(raw, sent), rec)
		totRaw, totSent, totRec = totRaw+raw, totSent+sent, totRec+rec
	}
	fmt.Fprintf(&table, "%-80s %-18s %5s %10d %10d %6.1f%% %8d\n", "total", "", "", totRaw, totSent, fixtures.Reduction(totRaw, totSent), totRec)
	t.Log(table.String())
}

// derivedSteps returns the bodies of the requests that ended each run of
// tool results in body's history.
func derivedSteps(t *testing.T, format provider.Format, body []byte) [][]byte {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		t.Fatal(err)
	}
	key := "messages"
	if format == "openai_responses" {
		key = "input"
	}
	var items []json.RawMessage
	if err := json.Unmarshal(top[key], &items); err != nil {
		t.Fatal(err)
	}
	isResult := func(raw json.RawMessage) bool {
		var m struct {
			Role    string          `json:"role"`
			Type    string          `json:"type"`
			Content json.RawMessage `json:"content"`
		}
		_ = json.Unmarshal(raw, &m)
		switch format {
		case "openai_chat":
			return m.Role == "tool" || m.Role == "function"
		case "openai_responses":
			return m.Type == "function_call_output" || m.Type == "custom_tool_call_output"
		}
		return m.Role == "user" && bytes.Contains(m.Content, []byte(`"tool_result"`))
	}
	var out [][]byte
	for k := 1; k <= len(items); k++ {
		if !isResult(items[k-1]) || (k < len(items) && isResult(items[k])) {
			continue
		}
		list, _ := json.Marshal(items[:k])
		top[key] = list
		b, err := json.Marshal(top)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}
