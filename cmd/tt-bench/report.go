package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func q(durs []time.Duration, p float64) float64 {
	c := append([]time.Duration(nil), durs...)
	return msOf(fixtures.Quantile(c, p))
}

// cpuMS is Caddy's CPU per timed gateway request in milliseconds.
func (r *result) cpuMS() float64 {
	if len(r.gw) == 0 {
		return 0
	}
	return float64(r.cpuTicks) * 1000 / clockTick / float64(len(r.gw))
}

// faultsPerReq is Caddy's minor page faults per timed gateway request.
func (r *result) faultsPerReq() float64 {
	if len(r.gw) == 0 {
		return 0
	}
	return float64(r.faults) / float64(len(r.gw))
}

func (r *result) tokenSummary() string {
	keys := make([]string, 0, len(r.tokens))
	for k := range r.tokens {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, r.tokens[k]))
	}
	for _, k := range sortedKeys(r.notCompiled) {
		parts = append(parts, fmt.Sprintf("not compiled (%s) %d", k, r.notCompiled[k]))
	}
	return strings.Join(parts, ", ")
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (r *result) name() string { return fmt.Sprintf("%s %s %s", r.format, r.size, r.mode) }

func printText(w io.Writer, r *result) {
	fmt.Fprintf(w, "%-22s conn=%s n=%d  added p50 %.2f  p99 %.2f  p999 %.2f ms  (gateway p50 %.2f, direct p50 %.2f ms)  caddy CPU %.2f ms/req  %.0f faults/req  peak RSS %.1f MB  body %d -> %d bytes  tokens: %s  load %s\n",
		r.name(), r.conn, len(r.added), q(r.added, 0.5), q(r.added, 0.99), q(r.added, 0.999),
		q(r.gw, 0.5), q(r.direct, 0.5), r.cpuMS(), r.faultsPerReq(), float64(r.peakKB)/1024, r.bodyBytes, r.sentBytes, r.tokenSummary(), r.load)
}

func machine() string {
	model := ""
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs, %s, %s/%s, %s", runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

func printMarkdownHeader(w io.Writer, o options) {
	conn := "a new connection per request"
	if !o.newConn {
		conn = "kept-alive connections"
	}
	if o.floor {
		conn += "; Caddy's `reverse_proxy` alone, without `token_terminator`"
	}
	fmt.Fprintf(w, "Run %s on %s; %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), machine(), conn)
	fmt.Fprintf(w, "Command: `%s`\n\n", o.command)
	fmt.Fprintln(w, "| case | n | added p50 / p99 / p999 ms | through the gateway p50 ms | direct p50 ms | Caddy CPU ms/request | Caddy peak RSS MB | body → sent bytes | token counts | load (1, 5, 15 min) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
}

func printMarkdownRow(w io.Writer, r *result) {
	fmt.Fprintf(w, "| %s | %d | %.2f / %.2f / %.2f | %.2f | %.2f | %.2f | %.1f | %d → %d | %s | %s |\n",
		r.name(), len(r.added), q(r.added, 0.5), q(r.added, 0.99), q(r.added, 0.999), q(r.gw, 0.5), q(r.direct, 0.5),
		r.cpuMS(), float64(r.peakKB)/1024, r.bodyBytes, r.sentBytes, r.tokenSummary(), r.load)
}

// printTargets prints the targets the run's cases can judge, each with its
// figure and whether it holds.
func printTargets(w io.Writer, rs []*result) {
	find := func(format, size, mode string) *result {
		for _, r := range rs {
			if r.format == format && r.size == size && r.mode == mode {
				return r
			}
		}
		return nil
	}
	type row struct{ target, figure, holds string }
	var rows []row
	yes := func(ok bool) string {
		if ok {
			return "holds"
		}
		return "**does not hold**"
	}
	for _, r := range rs {
		if r.size != "1MB" {
			continue
		}
		switch r.mode {
		case "warm":
			p50, p99 := q(r.added, 0.5), q(r.added, 0.99)
			rows = append(rows, row{fmt.Sprintf("%s 1 MB warm: added ≤ 2 ms p50, ≤ 5 ms p99", r.format),
				fmt.Sprintf("%.2f / %.2f ms", p50, p99), yes(p50 <= 2 && p99 <= 5)})
		case "cold":
			p50 := q(r.added, 0.5)
			rows = append(rows, row{fmt.Sprintf("%s 1 MB cold: added ≤ 12 ms p50", r.format),
				fmt.Sprintf("%.2f ms", p50), yes(p50 <= 12)})
		case "first":
			if c := find(r.format, r.size, "cold"); c != nil {
				f, cp := q(r.added, 0.5), q(c.added, 0.5)
				rows = append(rows, row{fmt.Sprintf("%s 1 MB first counted request after start ≤ cold (p50 of %d starts)", r.format, len(r.added)),
					fmt.Sprintf("%.2f ms against %.2f ms", f, cp), yes(f <= cp)})
			}
		}
	}
	for _, r := range rs {
		if r.size != "16MB" || r.mode != "warm" {
			continue
		}
		if one := find(r.format, "1MB", "warm"); one != nil {
			big, small := q(r.added, 0.5), q(one.added, 0.5)
			rows = append(rows, row{fmt.Sprintf("%s 16 MB warm ≤ 16× 1 MB warm (added p50)", r.format),
				fmt.Sprintf("%.2f ms = %.1f× %.2f ms", big, big/math.Max(small, 0.001), small), yes(big <= 16*small)})
		}
	}
	for _, r := range rs {
		if r.format == "chat" || r.mode == "first" {
			continue
		}
		if c := find("chat", r.size, r.mode); c != nil {
			x, cp := q(r.added, 0.5), q(c.added, 0.5)
			d := 100 * (x - cp) / math.Max(cp, 0.001)
			rows = append(rows, row{fmt.Sprintf("%s %s %s within 10%% of chat (added p50)", r.format, r.size, r.mode),
				fmt.Sprintf("%.2f against %.2f ms (%+.0f%%)", x, cp, d), yes(math.Abs(d) <= 10)})
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | figure | |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s |\n", r.target, r.figure, r.holds)
	}
}
