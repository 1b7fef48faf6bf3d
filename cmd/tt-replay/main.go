// Command tt-replay feeds recorded agent sessions through the request
// compiler, step by step, with a fresh embedded vault, and prints per session
// what went upstream: bytes, reduction, receipts, folded turns, compile time,
// and an Anthropic-style cache-adjusted cost.
//
// Usage:
//
//	go run ./cmd/tt-replay [-corpus ../shared/corpus] [-match substring] [-tokenizer auto]
//
// The cache-adjusted cost prices each step as a provider with exact-prefix
// prompt caching would: the part of the forwarded body that repeats the
// previous step's forwarded body as a prefix is a cache read (0.1x), the
// rest a cache write (1.25x). It is computed for the raw session and for
// the compiled one, in bytes, and in tokens where the model's own tokenizer
// is known (OpenAI models; Claude and open models show "none").
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/compiler"
	"github.com/tokenterminator/caddy-token-terminator/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/tokens"
	"github.com/tokenterminator/caddy-token-terminator/vault"
)

func main() {
	def, _ := compilertest.CorpusDir()
	dir := flag.String("corpus", def, "corpus folder (with index.json)")
	match := flag.String("match", "", "only sessions whose file name contains this")
	leases := flag.Int("inline_leases", 1, "inline leases (0 = off)")
	compaction := flag.Bool("compaction", true, "context compaction")
	tokenizer := flag.String("tokenizer", "auto", "token gate and token figures: auto|o200k_base|cl100k_base|off")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "tt-replay: no corpus folder (use -corpus)")
		os.Exit(2)
	}
	sessions, err := compilertest.LoadCorpus(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tt-replay:", err)
		os.Exit(1)
	}
	var pick []compilertest.CorpusFile
	for _, s := range sessions {
		if s.Format != "mixed" && strings.Contains(s.Name, *match) {
			pick = append(pick, s)
		}
	}
	tmp, err := os.MkdirTemp("", "tt-replay-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, "tt-replay:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(tmp)
	store, err := vault.Open(vault.Config{Dir: tmp})
	if err != nil {
		fmt.Fprintln(os.Stderr, "tt-replay:", err)
		os.Exit(1)
	}
	defer store.Close()
	opts := DefaultOptions()
	opts.InlineLeases = *leases
	opts.Compaction.Enabled = *compaction
	// Offline, the replay can wait for exact counts: a long budget means
	// no request is judged or reported without them.
	counter, err := tokens.New(tokens.Config{Tokenizer: *tokenizer, Budget: time.Minute})
	if err != nil {
		fmt.Fprintln(os.Stderr, "tt-replay:", err)
		os.Exit(2)
	}
	c, err := compiler.New(opts, store, counter)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tt-replay:", err)
		os.Exit(1)
	}
	var rows []Row
	for _, s := range pick {
		rows = append(rows, Replay(c, counter, s))
	}
	Print(os.Stdout, rows)
}

// DefaultOptions are the gateway's defaults (Caddyfile.example).
func DefaultOptions() compiler.Options {
	return compiler.Options{
		MinArtifactChars: 8000, MaxArtifactChars: 2000000, InlineLeases: 1,
		Compaction: compiler.Compaction{Enabled: true, MinVaultChars: 4000, CollapseAfterTurns: 6, InlineRecentTurns: 5},
	}
}

// Row is the replay of one session.
type Row struct {
	Name, Format      string
	Steps             int
	Raw, Sent         int
	Receipts, Folded  int
	Accepted          int
	Reasons           map[compiler.Reason]int
	P50, P99          time.Duration
	RawCost, SentCost float64
	Invalid           int

	// Token figures, where the model's own tokenizer applies to every step.
	Tokens                  bool
	RawTokens, SentTokens   int
	RawTokCost, SentTokCost float64
}

// Replay compiles every step of a session in order, as one tenant.
func Replay(c *compiler.Compiler, tc compiler.TokenCounter, s compilertest.CorpusFile) Row {
	r := Row{Name: s.Name, Format: s.Format, Steps: len(s.Requests), Reasons: map[compiler.Reason]int{}, Tokens: true}
	var durs []time.Duration
	var prevRaw, prevSent []byte
	for _, req := range s.Requests {
		body := req.Body
		res := c.Compile(context.Background(), compiler.Request{
			Path: req.Path, Body: body, Mode: compiler.ModeEnforce,
			Scope: compiler.Scope{Tenant: "replay/" + s.Name},
		})
		durs = append(durs, res.Total)
		r.Raw += len(body)
		r.Sent += len(res.Body)
		r.Receipts += res.Receipts
		r.Folded += res.Folded
		if res.Decision == compiler.Accepted {
			r.Accepted++
			if err := compiler.CheckCompacted(req.Path, body, res.Body); err != nil {
				r.Invalid++
			}
		} else {
			r.Reasons[res.Reason]++
		}
		r.RawCost += compilertest.CacheCost(prevRaw, body)
		r.SentCost += compilertest.CacheCost(prevSent, res.Body)
		if r.Tokens {
			model := modelOf(body)
			rawCost, rawN, ok1 := TokenCacheCost(tc, model, prevRaw, body)
			sentCost, sentN, ok2 := TokenCacheCost(tc, model, prevSent, res.Body)
			r.Tokens = ok1 && ok2
			r.RawTokens += rawN
			r.SentTokens += sentN
			r.RawTokCost += rawCost
			r.SentTokCost += sentCost
		}
		prevRaw, prevSent = body, res.Body
	}
	slices.Sort(durs)
	r.P50 = durs[len(durs)/2]
	r.P99 = durs[(len(durs)*99)/100]
	return r
}

// TokenCacheCost is CacheCost in tokens: the tokens of the shared prefix
// are read at 0.1x, the rest of the body's tokens written at 1.25x. ok is
// false when no exact tokenizer applies to the model.
func TokenCacheCost(tc compiler.TokenCounter, model string, prev, cur []byte) (cost float64, n int, ok bool) {
	ctx := context.Background()
	all := tc.Count(ctx, model, cur)
	if all.Status != compiler.TokensExact {
		return 0, 0, false
	}
	p := compilertest.CommonPrefix(prev, cur)
	read := 0
	if p > 0 {
		pc := tc.Count(ctx, model, cur[:p])
		if pc.Status != compiler.TokensExact {
			return 0, 0, false
		}
		read = min(pc.N, all.N)
	}
	return 0.1*float64(read) + 1.25*float64(all.N-read), all.N, true
}

func modelOf(body []byte) string {
	var v struct{ Model string }
	_ = json.Unmarshal(body, &v)
	return v.Model
}

// Print writes the rows as a Markdown table with a total line.
func Print(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| session | format | steps | raw bytes | sent bytes | reduction | receipts | folded | accepted | p50 ms | p99 ms | cache cost raw | cache cost sent | cost change | raw tokens | sent tokens | token cache cost change |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var tot Row
	for _, r := range rows {
		printRow(w, shortName(r.Name), r)
		tot.Steps += r.Steps
		tot.Raw += r.Raw
		tot.Sent += r.Sent
		tot.Receipts += r.Receipts
		tot.Folded += r.Folded
		tot.Accepted += r.Accepted
		tot.RawCost += r.RawCost
		tot.SentCost += r.SentCost
		tot.Invalid += r.Invalid
		if r.Tokens {
			tot.RawTokens += r.RawTokens
			tot.SentTokens += r.SentTokens
			tot.RawTokCost += r.RawTokCost
			tot.SentTokCost += r.SentTokCost
		}
	}
	tot.Tokens = tot.RawTokens > 0
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
	toks := "| none | none | none |"
	if r.Tokens {
		toks = fmt.Sprintf("| %d | %d | %+.1f%% |", r.RawTokens, r.SentTokens, 100*(r.SentTokCost-r.RawTokCost)/r.RawTokCost)
	}
	fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %.1f%% | %d | %d | %d %s| %.0f | %.0f | %+.1f%% %s\n",
		name, r.Format, r.Steps, r.Raw, r.Sent, pct(r.Raw-r.Sent, r.Raw), r.Receipts, r.Folded, r.Accepted,
		timing, r.RawCost, r.SentCost, pct(int(r.SentCost-r.RawCost), int(r.RawCost)), toks)
}

func shortName(n string) string {
	if i := strings.LastIndex(n, "/"); i >= 0 {
		n = n[i+1:]
	}
	if len(n) > 48 {
		n = n[:48] + "…"
	}
	return n
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
