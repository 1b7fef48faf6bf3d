package compiler_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/compiler"
	"github.com/tokenterminator/caddy-token-terminator/compiler/compilertest"
)

// TestCorpus replays every body of the shared corpus (../shared/corpus)
// through the compiler with a fresh in-memory vault per file, steps in
// order: every forwarded body must pass the oracle (assertSpliced, the
// validity check, receipts only in slots), a retry must compile to the
// same bytes, and no rewrite may be refused by the checker. It logs the
// per-file reduction table.
func TestCorpus(t *testing.T) {
	dir, ok := compilertest.CorpusDir()
	if !ok {
		t.Skip("shared corpus not found (../shared/corpus)")
	}
	files, err := compilertest.LoadCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
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
		fmt.Fprintf(&table, "%-80s %-18s %5d %10d %10d %6.1f%% %8d\n", f.Name, f.Format, len(f.Requests), raw, sent, pct(raw, sent), rec)
		totRaw, totSent, totRec = totRaw+raw, totSent+sent, totRec+rec
	}
	fmt.Fprintf(&table, "%-80s %-18s %5s %10d %10d %6.1f%% %8d\n", "total", "", "", totRaw, totSent, pct(totRaw, totSent), totRec)
	t.Log(table.String())
}

func pct(raw, sent int) float64 {
	if raw == 0 {
		return 0
	}
	return 100 * float64(raw-sent) / float64(raw)
}
