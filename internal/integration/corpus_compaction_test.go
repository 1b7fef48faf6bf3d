package integration

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
)

// TestCorpusCompactedThroughCaddy replays every corpus session through a
// real Caddy with the module at its defaults (leases and context compaction
// on). Every forwarded body must pass the validity oracle (structure outside
// receipts and summaries unchanged, provider rules kept) and match its
// Token-Terminator header. It logs, per session, the reduction and the
// cache-adjusted cost (cache reads 0.1x, writes 1.25x), and fails if any
// session costs more with the gateway than without it.
func TestCorpusCompactedThroughCaddy(t *testing.T) {
	files := compilertest.Corpus(t)
	up := newUpstream(t)
	g := startGateway(t, `
	token_terminator {
		vault_dir $VAULT
	}
	reverse_proxy $UPSTREAM
`, up)

	var table strings.Builder
	fmt.Fprintf(&table, "\n%-50s %4s %10s %10s %6s %8s %6s %12s %12s %7s\n", "session", "reqs", "raw", "sent", "red%", "receipts", "folded", "cost raw", "cost sent", "change")
	for fi, f := range files {
		if f.Format == "mixed" {
			continue
		}
		auth := fmt.Sprintf("Authorization: Bearer sk-compact-%d", fi)
		var raw, sent, receipts, folded int
		var costRaw, costSent float64
		var prevRaw, prevSent []byte
		for si, r := range f.Requests {
			resp := g.post(r.Path, r.Body, auth, "anthropic-version: 2023-06-01")
			if resp.Status != http.StatusOK {
				t.Fatalf("%s step %d: status %d", f.Name, si, resp.Status)
			}
			got := up.last(t).Body
			if err := compiler.CheckCompactedKeyed(r.Path, r.Body, got); err != nil {
				t.Fatalf("%s step %d: forwarded body fails the validity oracle: %v", f.Name, si, err)
			}
			m := ttHeaderRE.FindStringSubmatch(resp.TT)
			if m == nil || (m[1] == "accepted") == (string(got) == string(r.Body)) || m[3] != fmt.Sprint(len(got)) {
				t.Fatalf("%s step %d: header %q for %d of %d bytes", f.Name, si, resp.TT, len(got), len(r.Body))
			}
			receipts += strings.Count(string(got), artifact.ReceiptPrefix)
			folded += strings.Count(string(got), artifact.FoldPrefix)
			raw, sent = raw+len(r.Body), sent+len(got)
			costRaw += compilertest.CacheCost(prevRaw, r.Body)
			costSent += compilertest.CacheCost(prevSent, got)
			prevRaw, prevSent = r.Body, got
		}
		if costSent > costRaw {
			t.Errorf("%s costs more with the gateway: %.0f > %.0f", f.Name, costSent, costRaw)
		}
		name := f.Name[strings.LastIndex(f.Name, "/")+1:]
		if len(name) > 50 {
			name = name[:49] + "…"
		}
		fmt.Fprintf(&table, "%-50s %4d %10d %10d %5.1f%% %8d %6d %12.0f %12.0f %+6.1f%%\n", name, len(f.Requests), raw, sent,
			percent(raw, sent), receipts, folded, costRaw, costSent, 100*(costSent-costRaw)/costRaw)
	}
	t.Log(table.String())
}
