// Command tt-bench measures the gateway from outside, as an operator sees
// it: it starts the built Caddy binary (cmd/caddy of this module) with a
// Caddyfile, a loopback provider (the sink: it reads each body whole and
// answers with a small JSON answer that reports usage), and sends generated
// agent requests from its own process, each paired with the same body sent
// straight to the sink (alternating which goes first). It prints, per case,
// the latency the gateway adds (p50, p99, p999 of the per-pair
// differences), the CPU time of the Caddy process per request (utime+stime
// from /proc/<pid>/stat around each gateway request) and its peak RSS
// (VmHWM).
//
// Usage:
//
//	go run ./cmd/tt-bench [-caddy bin] [-caddyfile file] [-formats chat,responses,anthropic]
//	    [-sizes 1MB] [-modes warm,cold,first] [-conn new|keep] [-n 200] [-cold_n 40] [-first_n 5]
//	    [-think 1s] [-profile dir] [-markdown] [-short]
//
// Cases (one Caddy process each, with a fresh vault):
//   - warm: the same request again; every tool result is already vaulted
//     and every token count cached (a retry of a conversation).
//   - cold: every timed request is a new conversation whose content the
//     process has never seen (its own identifiers), after the request that
//     delivered its results was sent untimed: all of them are counted,
//     written, synced and read back.
//   - first: the first counted request of a freshly started Caddy (a new
//     process per sample, on the vault an untimed first start filled, as
//     a restart finds it), right after its port answers.
//
// -conn new opens a new connection per request (as many SDK clients do
// through a proxy); keep reuses kept-alive connections. Every answer is
// checked: the status, the sink's answer for that format, and every body
// the sink read must be JSON of its Content-Length; any wrong answer ends
// the run with an error. Each case's setup must be compiled with every
// result a receipt; a timed request that was not (the gateway failing
// open, e.g. past compile_timeout on a loaded machine) is counted and
// reported with the token figures.
//
// The sink runs in a process of its own (this command with
// -sink_process), as a provider does: in the client's process it answered
// the direct request without a hand-off between processes, which made the
// direct path faster than any provider and the added figure too large.
//
// -profile dir (a binary built with -tags ttbench, which sets the mutex and
// block profile rates) writes, per case, a CPU profile and an execution
// trace of the timed requests and the allocation, mutex and block profiles
// before and after them, from the admin API's /debug/pprof handlers.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

type options struct {
	caddy, caddyfile string
	formats          []shape
	sizes            []int // bytes
	warmSizes        []int // bytes; warm only
	modes            []string
	newConn          bool
	n, coldN, firstN int
	warmup           int
	think            time.Duration // cold: the pause between a conversation's delivery and its timed request
	profile          string
	profileSeconds   int
	markdown         bool
	keep             bool
	floor            bool // reverse_proxy alone, no token_terminator: what Caddy itself adds
	seed             uint64
	command          string // the command line, for the markdown header
}

func main() {
	var o options
	formats := flag.String("formats", "chat,responses,anthropic", "request formats: chat, responses, anthropic")
	sizes := flag.String("sizes", "1MB", "request sizes, e.g. 256KB,1MB,16MB (20 KB tool results each)")
	warmSizes := flag.String("warm_sizes", "", "more sizes run warm only, e.g. 16MB (for the 16 MB ≤ 16× 1 MB target)")
	modes := flag.String("modes", "warm,cold,first", "cases: warm, cold, first")
	conn := flag.String("conn", "new", "new: a new connection per request; keep: kept-alive connections")
	flag.StringVar(&o.caddy, "caddy", "", "the Caddy binary (default: go build ./cmd/caddy of this module into a temporary directory)")
	flag.StringVar(&o.caddyfile, "caddyfile", "", "Caddyfile template ($LISTEN, $ADMIN, $UPSTREAM, $VAULT, $LOG replaced; default: token_terminator defaults before reverse_proxy)")
	flag.IntVar(&o.n, "n", 200, "timed warm pairs per 1 MB case (fewer for larger sizes, at least 20)")
	flag.IntVar(&o.coldN, "cold_n", 40, "timed cold pairs per 1 MB case (fewer for larger sizes, at least 5)")
	flag.IntVar(&o.firstN, "first_n", 5, "first-request samples (a Caddy start each)")
	flag.IntVar(&o.warmup, "warmup", 20, "untimed pairs before the warm and cold cases")
	flag.DurationVar(&o.think, "think", 0, "cold: pause between the untimed request that delivers a conversation's results and its timed next request (the model's answer time in a real session; 0: send at once)")
	flag.StringVar(&o.profile, "profile", "", "write profiles of every case into this directory (builds with -tags ttbench unless -caddy is given)")
	flag.IntVar(&o.profileSeconds, "profile_seconds", 10, "seconds of CPU profile and trace per case")
	flag.BoolVar(&o.floor, "floor", false, "time Caddy's reverse_proxy alone (no token_terminator in the Caddyfile): the floor any handler before it adds to; warm only")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory (Caddyfiles, Caddy logs with each request's read_ms, parse_ms, compile_ms, vaults) and print its path")
	flag.BoolVar(&o.markdown, "markdown", false, "print a Markdown section (figures, targets) instead of text lines")
	seed := flag.Uint64("seed", 0, "content seed (0: from the clock, so content is new to any earlier run)")
	sinkProc := flag.Bool("sink_process", false, "run as the sink (internal: the command starts itself so)")
	short := flag.Bool("short", false, "a few requests of every case at 256 KB (a check that the command works, not a measurement)")
	flag.Parse()
	if *sinkProc {
		if err := serveSink(); err != nil {
			fail(err)
		}
		return
	}
	o.command = commandLine(os.Args[1:])
	if *short {
		o.n, o.coldN, o.firstN, o.warmup = 4, 2, 1, 1
		if !flagSet("sizes") {
			*sizes = "256KB"
		}
	}
	o.seed = *seed
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	var err error
	if o.formats, o.sizes, o.modes, err = parseCases(*formats, *sizes, *modes); err != nil {
		fail(err)
	}
	if *warmSizes != "" {
		if _, o.warmSizes, _, err = parseCases(*formats, *warmSizes, "warm"); err != nil {
			fail(err)
		}
	}
	if o.floor {
		if err := floorCases(o.modes, o.caddyfile); err != nil {
			fail(err)
		}
	}
	switch *conn {
	case "new":
		o.newConn = true
	case "keep":
	default:
		fail(fmt.Errorf("-conn %q: want new or keep", *conn))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fail(err)
	}
}

// commandLine is the command as the Markdown header shows it: without the
// binary's path, which names a temporary directory.
func commandLine(args []string) string {
	out := []string{"go run ./cmd/tt-bench"}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "-caddy" || a == "--caddy" {
			i++
			continue
		}
		if strings.HasPrefix(a, "-caddy=") || strings.HasPrefix(a, "--caddy=") {
			continue
		}
		out = append(out, a)
	}
	return strings.Join(out, " ")
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "tt-bench:", err)
	os.Exit(1)
}

func parseCases(formats, sizes, modes string) ([]shape, []int, []string, error) {
	var fs []shape
	for _, f := range strings.Split(formats, ",") {
		s, ok := shapeNamed(strings.TrimSpace(f))
		if !ok {
			return nil, nil, nil, fmt.Errorf("-formats: unknown format %q (chat, responses, anthropic)", f)
		}
		fs = append(fs, s)
	}
	var ss []int
	for _, s := range strings.Split(sizes, ",") {
		n, err := parseSize(strings.TrimSpace(s))
		if err != nil {
			return nil, nil, nil, err
		}
		ss = append(ss, n)
	}
	var ms []string
	for _, m := range strings.Split(modes, ",") {
		m = strings.TrimSpace(m)
		if m != "warm" && m != "cold" && m != "first" {
			return nil, nil, nil, fmt.Errorf("-modes: unknown case %q (warm, cold, first)", m)
		}
		ms = append(ms, m)
	}
	return fs, ss, ms, nil
}

func parseSize(s string) (int, error) {
	mult := 1
	num := s
	switch {
	case strings.HasSuffix(s, "MB"):
		mult, num = 1<<20, strings.TrimSuffix(s, "MB")
	case strings.HasSuffix(s, "KB"):
		mult, num = 1<<10, strings.TrimSuffix(s, "KB")
	}
	n, err := strconv.Atoi(num)
	if err != nil || n <= 0 || n*mult < 2*outputChars || n*mult > 64<<20 {
		return 0, fmt.Errorf("-sizes: %q is not a size between 40KB and 64MB", s)
	}
	return n * mult, nil
}

func sizeName(n int) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%dMB", n>>20)
	}
	return fmt.Sprintf("%dKB", n>>10)
}

// run builds the binary when needed, starts the sink and runs every case.
func run(ctx context.Context, o options, out io.Writer) error {
	tmp, err := os.MkdirTemp("", "tt-bench-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintf(os.Stderr, "tt-bench: keeping %s\n", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	template, err := prepareCaddy(ctx, &o, tmp)
	if err != nil {
		return err
	}
	if o.profile != "" {
		if err := os.MkdirAll(o.profile, 0o755); err != nil {
			return err
		}
	}
	s, err := startSinkProcess(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	b := &bench{o: o, sink: s, template: template, tmp: tmp, cl: newClient(o.newConn)}
	var results []*result
	if o.markdown {
		printMarkdownHeader(out, o)
	}
	for _, c := range o.cases() {
		size, sh, mode := c.size, c.sh, c.mode
		if err := ctx.Err(); err != nil {
			return err
		}
		res, err := b.runCase(ctx, sh, size, mode)
		if err != nil {
			return fmt.Errorf("%s %s %s: %w", sh.name, sizeName(size), mode, err)
		}
		if p := s.problems(); len(p) > 0 {
			return fmt.Errorf("%s %s %s: the sink got wrong bodies: %s", sh.name, sizeName(size), mode, strings.Join(p, "; "))
		}
		results = append(results, res)
		if o.markdown {
			printMarkdownRow(out, res)
		} else {
			printText(out, res)
		}
	}
	if o.markdown && !o.floor {
		printTargets(out, results)
	}
	return nil
}

// prepareCaddy builds the caddy binary into tmp unless o names one, and
// returns the Caddyfile template (o's file, or the default).
func prepareCaddy(ctx context.Context, o *options, tmp string) (string, error) {
	if o.caddy == "" {
		root, err := moduleRoot()
		if err != nil {
			return "", err
		}
		o.caddy = filepath.Join(tmp, "caddy")
		tags := ""
		if o.profile != "" {
			tags = "ttbench"
		}
		fmt.Fprintf(os.Stderr, "tt-bench: building %s\n", o.caddy)
		if err := buildCaddy(ctx, root, o.caddy, tags); err != nil {
			return "", err
		}
	}
	template := defaultCaddyfile
	if o.floor {
		template = floorCaddyfile
	}
	if o.caddyfile != "" {
		data, err := os.ReadFile(o.caddyfile)
		if err != nil {
			return "", err
		}
		template = string(data)
	}
	return template, nil
}

// kase is one case of a run.
type kase struct {
	size int
	sh   shape
	mode string
}

// cases are the run's cases: every size, format and mode, then the
// extra warm sizes of every format.
func (o options) cases() []kase {
	var cases []kase
	for _, size := range o.sizes {
		for _, sh := range o.formats {
			for _, mode := range o.modes {
				cases = append(cases, kase{size, sh, mode})
			}
		}
	}
	for _, size := range o.warmSizes {
		for _, sh := range o.formats {
			cases = append(cases, kase{size, sh, "warm"})
		}
	}
	return cases
}
