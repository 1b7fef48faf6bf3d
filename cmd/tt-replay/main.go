// Command tt-replay feeds agent sessions through the request compiler, step
// by step, with a fresh embedded vault, and bills every step as the
// provider's prompt cache would (cost.Simulator: render order, breakpoints,
// minimum prefix, block granularity, TTL with idle gaps between steps). It
// prints per session the bytes that went upstream and the billed input cost
// raw vs sent, in base-input-token units (tokens estimated at
// cost.DefaultBytesPerToken bytes each), with compaction on and off.
//
// Usage:
//
//	go run ./cmd/tt-replay [-corpus ../shared/corpus] [-generated] [-match substring]
//	    [-gap 20s] [-idle 10m -idle_every 6] [-compaction=true] [-cost=true]
//
// Sessions: the corpus's step files (every request of a real session) and,
// with -generated, generated sessions with person turns and re-reads in all
// three formats plus Claude Code- and Codex-shaped ones.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
	"github.com/tokenterminator/caddy-token-terminator/internal/tokens"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/badgervault"
)

func main() {
	def, _ := fixtures.CorpusDir()
	dir := flag.String("corpus", def, "corpus folder (with index.json); empty: none")
	gen := flag.Bool("generated", false, "also replay generated sessions")
	match := flag.String("match", "", "only sessions whose name contains this")
	leases := flag.Int("inline_leases", 1, "inline leases (0 = off)")
	compaction := flag.Bool("compaction", true, "context compaction")
	costOn := flag.Bool("cost", true, "decide by expected billed cost")
	tokenizer := flag.String("tokenizer", "auto", "token gate: auto|o200k_base|cl100k_base|off")
	gap := flag.Duration("gap", 20*time.Second, "time between steps")
	idle := flag.Duration("idle", 0, "an idle gap inserted every -idle_every steps (e.g. past the cache TTL)")
	idleEvery := flag.Int("idle_every", 0, "steps between idle gaps (0: none)")
	leaseMin := flag.Int("lease_min_chars", 0, "smallest result a lease priced by the cost decision may receipt (0: the default)")
	horizon := flag.Int("horizon", 0, "cost horizon bound (0: the default)")
	trace := flag.Bool("trace", false, "print every step of the replayed sessions (compaction on) to stderr")
	workingState := flag.Int("working_state", 0, "working_state_chars: the working-state block's bound (0: off)")
	recoverEvery := flag.Int("recover_every", 0, "report recovery (recovery.go): the simulated model recovers every receipt of every n-th step (-1: report without recovering; 0: no report)")
	flag.Parse()

	pick := pickSessions(*dir, *gen, *match)
	if len(pick) == 0 {
		fmt.Fprintln(os.Stderr, "tt-replay: no sessions (use -corpus or -generated)")
		os.Exit(2)
	}
	tmp, err := os.MkdirTemp("", "tt-replay-*")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)
	store, err := badgervault.Open(badgervault.Config{Dir: tmp})
	if err != nil {
		fail(err)
	}
	defer store.Close()
	// Offline, the replay can wait for exact counts.
	counter, err := tokens.New(tokens.Config{Tokenizer: *tokenizer, Budget: time.Minute})
	if err != nil {
		fail(err)
	}
	opts := DefaultOptions()
	opts.InlineLeases = *leases
	opts.Compaction.Enabled = *compaction
	opts.Cost.Off = !*costOn
	opts.Cost.LeaseMinChars, opts.Cost.MaxHorizon = *leaseMin, *horizon
	opts.WorkingStateChars = *workingState
	off := opts
	off.Compaction.Enabled = false
	on, err := compiler.New(opts, store, counter)
	if err != nil {
		fail(err)
	}
	noCompaction, err := compiler.New(off, store, counter)
	if err != nil {
		fail(err)
	}
	clock := Clock{Gap: *gap, Idle: *idle, IdleEvery: *idleEvery}
	var rows []Row
	for _, s := range pick {
		var tw io.Writer
		if *trace {
			tw = os.Stderr
			fmt.Fprintf(tw, "# %s\n", s.Name)
		}
		r := ReplayTrace(on, s, clock, "on/", tw)
		r.SentOff = Replay(noCompaction, s, clock, "off/").Billed.Sent
		rows = append(rows, r)
	}
	Print(os.Stdout, rows)
	if *recoverEvery != 0 {
		newCompiler := func(o compiler.Options) (*compiler.Compiler, error) { return compiler.New(o, store, counter) }
		printRecovery(opts, newCompiler, store, on, pick, clock, *recoverEvery)
	}
}

// pickSessions is the stepped sessions of the corpus in dir (none when
// dir is empty), with the generated ones when gen, whose names contain
// match.
func pickSessions(dir string, gen bool, match string) []fixtures.CorpusFile {
	var sessions []fixtures.CorpusFile
	if dir != "" {
		files, err := fixtures.LoadCorpus(dir)
		if err != nil {
			fail(err)
		}
		for _, f := range files {
			if f.Steps && f.Format != fixtures.Mixed {
				sessions = append(sessions, f)
			}
		}
	}
	if gen {
		sessions = append(sessions, Generated()...)
	}
	var pick []fixtures.CorpusFile
	for _, s := range sessions {
		if strings.Contains(s.Name, match) {
			pick = append(pick, s)
		}
	}
	return pick
}

// printRecovery prints one recovery table per reinline_recovered value
// worth comparing: on (the default) carries what the model recovered
// inline again, cost lets the cost decision weigh that against a recovery
// round.
func printRecovery(opts compiler.Options, newCompiler func(compiler.Options) (*compiler.Compiler, error), arts recovery.Artifacts, on *compiler.Compiler, pick []fixtures.CorpusFile, clock Clock, recoverEvery int) {
	for _, mode := range []string{compiler.ReinlineOn, compiler.ReinlineCost} {
		withOpts := opts
		withOpts.Recovery = ToolRecovery()
		withOpts.ReinlineRecovered = mode
		with, err := newCompiler(withOpts)
		if err != nil {
			fail(err)
		}
		var rrows []RecoveryRow
		for _, s := range pick {
			rrows = append(rrows, ReplayRecovery(with, on, arts, s, clock, max(recoverEvery, 0), mode+"/"))
		}
		fmt.Printf("\nreinline_recovered %s\n\n", mode)
		PrintRecovery(os.Stdout, rrows)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "tt-replay:", err)
	os.Exit(1)
}

// DefaultOptions are the gateway's defaults (Caddyfile.example), but for
// the compile timeout: the replay measures decisions, and on a loaded
// machine a compile past the gateway's 2 s would go out as the original
// and change the figures (and every later step's cache state).
func DefaultOptions() compiler.Options {
	return compiler.Options{
		MinArtifactChars: 8000, MaxArtifactChars: 2000000, InlineLeases: 1, Timeout: time.Minute,
		Compaction: compiler.Compaction{Enabled: true, MinVaultChars: 4000, CollapseAfterTurns: 6, InlineRecentTurns: 5},
	}
}

// Generated are the generated sessions the replay reports: 36 steps with 12
// person turns and re-reads in each format, and real-client shapes (22
// steps, and 36 as the long ones).
func Generated() []fixtures.CorpusFile {
	var out []fixtures.CorpusFile
	for _, g := range []fixtures.SessionOptions{
		{Format: provider.Chat, Steps: 36, PersonTurns: 12, OutputChars: 6000, ReReadEvery: 5, Seed: 1},
		{Format: provider.Responses, Steps: 36, PersonTurns: 12, OutputChars: 6000, ReReadEvery: 5, Seed: 2},
		{Format: provider.Anthropic, Steps: 36, PersonTurns: 12, OutputChars: 6000, ReReadEvery: 5, Seed: 3, Client: "claude-code"},
		{Format: provider.Responses, Steps: 22, PersonTurns: 6, OutputChars: 9000, ReReadEvery: 4, Seed: 4, Client: "codex"},
		{Format: provider.Anthropic, Steps: 22, PersonTurns: 6, OutputChars: 9000, ReReadEvery: 4, Seed: 5, Client: "claude-code"},
		{Format: provider.Chat, Steps: 60, PersonTurns: 15, OutputChars: 9000, ReReadEvery: 7, Seed: 6},
		{Format: provider.Responses, Steps: 36, PersonTurns: 12, OutputChars: 9000, ReReadEvery: 5, Seed: 7, Client: "codex"},
		{Format: provider.Gemini, Steps: 22, PersonTurns: 6, OutputChars: 9000, ReReadEvery: 4, Seed: 8},
	} {
		name := fmt.Sprintf("generated/%s-%d-steps-%d-turns", g.Format, g.Steps, g.PersonTurns)
		if g.Client != "" {
			name += "-" + g.Client
		}
		out = append(out, fixtures.CorpusFile{Name: name, Format: g.Format, Steps: true, Requests: fixtures.Session(g)})
	}
	return out
}

// Clock spaces the steps of a session: Gap between steps, and every
// IdleEvery steps an Idle gap instead (a person away past the cache TTL).
type Clock struct {
	Gap, Idle time.Duration
	IdleEvery int
}

// At is when step i (from 0) is sent.
func (c Clock) At(i int) time.Time {
	t := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for k := 1; k <= i; k++ {
		if c.IdleEvery > 0 && k%c.IdleEvery == 0 {
			t = t.Add(c.Idle)
		} else {
			t = t.Add(c.Gap)
		}
	}
	return t
}

// Row is the replay of one session.
type Row struct {
	Name             string
	Format           provider.Format
	Steps            int
	Raw, Sent        int
	Receipts, Folded int
	Accepted         int
	Reasons          map[compiler.Reason]int
	P50, P99         time.Duration
	Invalid          int
	// Billed input cost, base-input-token units, as the provider cache
	// simulation charges it: the raw session, the compiled one, the
	// compiled one with compaction off.
	Billed  Billed
	SentOff float64
	// The compiler's own expected figures (Result.CostRaw / CostSent).
	ExpectRaw, ExpectSent float64
	// Dearer counts steps whose sent body was judged dearer than the
	// original over the decision's horizon (CostHorizonSent >
	// CostHorizonRaw): invariant 8 says none.
	Dearer int
}

// Billed is a session's simulated bill.
type Billed struct{ Raw, Sent float64 }

// Replay compiles every step of a session in order, as one tenant, and
// bills the raw and the forwarded bodies with one provider cache each.
func Replay(c *compiler.Compiler, s fixtures.CorpusFile, clock Clock, tenant string) Row {
	return ReplayTrace(c, s, clock, tenant, nil)
}

// ReplayTrace is Replay writing one line per step to trace (when not nil):
// the decision, bytes, receipts, folds, the compiler's expected figures and
// the simulated bills (tokens read and written) raw and sent.
func ReplayTrace(c *compiler.Compiler, s fixtures.CorpusFile, clock Clock, tenant string, trace io.Writer) Row {
	r := Row{Name: s.Name, Format: s.Format, Steps: len(s.Requests), Reasons: map[compiler.Reason]int{}}
	var durs []time.Duration
	var cfg cost.Config
	var rawSim, sentSim *cost.Simulator
	for i, req := range s.Requests {
		at := clock.At(i)
		res := c.Compile(context.Background(), compiler.Request{
			Path: req.Path, Body: req.Body, Mode: compiler.ModeEnforce, Time: at,
			Scope: artifact.Scope{Tenant: "replay/" + tenant + s.Name},
		})
		if rawSim == nil {
			m := cfg.Model(s.Format, modelOf(req.Body))
			rawSim, sentSim = &cost.Simulator{Model: m, Config: cfg}, &cost.Simulator{Model: m, Config: cfg}
		}
		durs = append(durs, res.Total)
		r.Raw += len(req.Body)
		r.Sent += len(res.Body)
		r.Receipts += res.Receipts
		r.Folded += res.Folded
		r.ExpectRaw += res.CostRaw
		r.ExpectSent += res.CostSent
		if res.CostHorizonSent > res.CostHorizonRaw*(1+1e-9) {
			r.Dearer++
		}
		if res.Decision == compiler.Accepted {
			r.Accepted++
			if err := compiler.CheckCompacted(req.Path, req.Body, res.Body); err != nil {
				r.Invalid++
			}
		} else {
			r.Reasons[res.Reason]++
		}
		br := rawSim.Step(cost.Render(s.Format, req.Body), at)
		bs := sentSim.Step(cost.Render(s.Format, res.Body), at)
		r.Billed.Raw += br.Cost
		r.Billed.Sent += bs.Cost
		if trace != nil {
			fmt.Fprintf(trace, "step %2d %-8s %-12s bytes %8d -> %8d receipts %3d folded %2d | expect raw %7.0f sent %7.0f | billed raw %7.0f (read %7.0f write %7.0f) sent %7.0f (read %7.0f write %7.0f)\n",
				i, res.Decision, res.Reason, len(req.Body), len(res.Body), res.Receipts, res.Folded, res.CostRaw, res.CostSent,
				br.Cost, br.Read, br.Written, bs.Cost, bs.Read, bs.Written)
		}
	}
	r.P50, r.P99 = fixtures.Quantile(durs, 0.5), fixtures.Quantile(durs, 0.99)
	r.SentOff = r.Billed.Sent
	return r
}

func modelOf(body []byte) string {
	var v struct{ Model string }
	_ = json.Unmarshal(body, &v)
	return v.Model
}

// Print writes the rows as a Markdown table with a total line.
func Print(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| session | format | steps | raw bytes | sent bytes | reduction | receipts | folded | accepted | not_cheaper | p50 ms | p99 ms | billed raw | billed sent | sent/raw | sent/raw compaction off |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var tot Row
	tot.Reasons = map[compiler.Reason]int{}
	for _, r := range rows {
		printRow(w, shortName(r.Name), r)
		tot.Steps += r.Steps
		tot.Raw += r.Raw
		tot.Sent += r.Sent
		tot.Receipts += r.Receipts
		tot.Folded += r.Folded
		tot.Accepted += r.Accepted
		tot.Billed.Raw += r.Billed.Raw
		tot.Billed.Sent += r.Billed.Sent
		tot.SentOff += r.SentOff
		tot.Invalid += r.Invalid
		tot.Reasons[compiler.ReasonNotCheaper] += r.Reasons[compiler.ReasonNotCheaper]
	}
	printRow(w, "**total**", tot)
	if tot.Invalid > 0 {
		fmt.Fprintf(w, "\nWARNING: %d forwarded bodies failed the validity oracle\n", tot.Invalid)
	}
}

func printRow(w io.Writer, name string, r Row) {
	timing := "| | "
	if r.Format != "" {
		timing = fmt.Sprintf("| %.2f | %.2f ", ms(r.P50), ms(r.P99))
	}
	fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %.1f%% | %d | %d | %d | %d %s| %.0f | %.0f | %.3f | %.3f |\n",
		name, r.Format, r.Steps, r.Raw, r.Sent, fixtures.Reduction(r.Raw, r.Sent), r.Receipts, r.Folded, r.Accepted,
		r.Reasons[compiler.ReasonNotCheaper], timing, r.Billed.Raw, r.Billed.Sent, ratio(r.Billed.Sent, r.Billed.Raw), ratio(r.SentOff, r.Billed.Raw))
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func shortName(n string) string {
	if i := strings.LastIndex(n, "/"); i >= 0 && !strings.HasPrefix(n, "generated/") {
		n = n[i+1:]
	}
	if len(n) > 60 {
		n = n[:60] + "…"
	}
	return n
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
