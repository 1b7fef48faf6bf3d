package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

func TestClock(t *testing.T) {
	c := Clock{Gap: 10 * time.Second, Idle: 10 * time.Minute, IdleEvery: 3}
	base := c.At(0)
	for i, want := range []time.Duration{0, 10 * time.Second, 20 * time.Second, 20*time.Second + 10*time.Minute, 30*time.Second + 10*time.Minute} {
		if got := c.At(i).Sub(base); got != want {
			t.Errorf("At(%d) = +%v, want +%v", i, got, want)
		}
	}
}

// The replay's bill of a session is the simulator's over the same bodies:
// with nothing to compile (every result below the thresholds) the sent
// bill equals the raw one, step by step.
func TestReplayBillsLikeTheSimulator(t *testing.T) {
	s := fixtures.CorpusFile{Name: "three", Format: provider.Anthropic, Steps: true,
		Requests: fixtures.Session(fixtures.SessionOptions{Format: provider.Anthropic, Steps: 3, PersonTurns: 1, OutputChars: 3000, Seed: 9, Client: "claude-code"})}
	opts := DefaultOptions()
	opts.MinArtifactChars, opts.Cost.LeaseMinChars, opts.Compaction.Enabled = 1000000, 1000000, false
	c, err := compiler.New(opts, compilertest.NewMemStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	clock := Clock{Gap: time.Minute, Idle: time.Hour, IdleEvery: 2}
	r := Replay(c, s, clock, "t/")
	var cfg cost.Config
	sim := cost.Simulator{Model: cfg.Model("anthropic_messages", "claude-sonnet-4-5"), Config: cfg}
	want := 0.0
	var bills []cost.Bill
	for i, req := range s.Requests {
		b := sim.Step(cost.Render(provider.Format(s.Format), req.Body), clock.At(i))
		bills = append(bills, b)
		want += b.Cost
	}
	// Step 2 reads step 1's prefix (a minute later); step 3 comes after the
	// idle hour and reads nothing.
	if bills[1].Read == 0 || bills[2].Read != 0 || bills[2].Written == 0 {
		t.Fatalf("bills %+v", bills)
	}
	if r.Billed.Raw != want || r.Billed.Sent != want || r.Accepted != 0 {
		t.Fatalf("replay billed raw %v sent %v accepted %d, simulator %v", r.Billed.Raw, r.Billed.Sent, r.Accepted, want)
	}
}

// The targets on generated sessions: every body valid, no session costs
// more than raw, compaction never costs more than compaction off, with and
// without idle gaps past the TTL; the long session at most 0.60 of raw.
func TestReplayGeneratedTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("replays ~300 requests")
	}
	clocks := []Clock{{Gap: 20 * time.Second, Idle: 10 * time.Minute, IdleEvery: 6}, {Gap: 20 * time.Second},
		{Gap: 20 * time.Second, Idle: 6 * time.Minute, IdleEvery: 5}}
	if raceEnabled {
		clocks = clocks[:1]
	}
	for _, clock := range clocks {
		on, off := compactionOnOff(t)
		var rows []Row
		for _, s := range Generated() {
			if raceEnabled && len(s.Requests) > 22 {
				continue
			}
			r := Replay(on, s, clock, "on/")
			r.SentOff = Replay(off, s, clock, "off/").Billed.Sent
			rows = append(rows, r)
			if r.Invalid != 0 {
				t.Errorf("%s: %d invalid bodies", s.Name, r.Invalid)
			}
			if r.Billed.Sent > r.Billed.Raw*(1+1e-9) {
				t.Errorf("%s idle=%v: billed %.0f > raw %.0f", s.Name, clock.Idle, r.Billed.Sent, r.Billed.Raw)
			}
			if r.Billed.Sent > r.SentOff*(1+1e-9) {
				t.Errorf("%s idle=%v: compaction on %.0f > off %.0f", s.Name, clock.Idle, r.Billed.Sent, r.SentOff)
			}
			if r.Dearer != 0 {
				t.Errorf("%s idle=%v: %d steps sent dearer than the original over the horizon", s.Name, clock.Idle, r.Dearer)
			}
			// Long sessions (36 steps and more) at most 0.60 of raw, the
			// Claude Code-shaped one too (its single moving breakpoint is
			// why receipts carry one: receipt_breakpoint.go).
			if len(s.Requests) >= 36 && r.Billed.Sent > 0.60*r.Billed.Raw {
				t.Errorf("%s idle=%v: long session at %.3f of raw", s.Name, clock.Idle, r.Billed.Sent/r.Billed.Raw)
			}
		}
		var out bytes.Buffer
		Print(&out, rows)
		if !bytes.Contains(out.Bytes(), []byte("| generated/openai_responses-22-steps-6-turns-codex | openai_responses | 22 |")) || !bytes.Contains(out.Bytes(), []byte("| **total** |")) {
			t.Fatalf("table:\n%s", out.String())
		}
		t.Logf("idle %v:\n%s", clock.Idle, out.String())
	}
}

// The corpus step sessions (real agent runs; skipped when the corpus is
// absent) with the gateway's defaults: each at most 0.70 of the raw bill,
// never dearer than raw, compaction never dearer than off, every body
// valid, no step judged dearer than its original over the horizon.
func TestReplayCorpusTargets(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("replays the corpus's ~100 steps")
	}
	dir, ok := fixtures.CorpusDir()
	if !ok {
		t.Skip("no corpus")
	}
	files, err := fixtures.LoadCorpus(dir)
	if err != nil {
		t.Fatal(err)
	}
	on, off := compactionOnOff(t)
	clock := Clock{Gap: 20 * time.Second}
	n := 0
	for _, f := range files {
		if !f.Steps || f.Format == "mixed" {
			continue
		}
		n++
		r := Replay(on, f, clock, "on/")
		offSent := Replay(off, f, clock, "off/").Billed.Sent
		ratio := r.Billed.Sent / r.Billed.Raw
		t.Logf("%s: %.3f of raw (compaction off %.3f)", shortName(f.Name), ratio, offSent/r.Billed.Raw)
		if r.Invalid != 0 || r.Dearer != 0 {
			t.Errorf("%s: %d invalid bodies, %d steps dearer over the horizon", f.Name, r.Invalid, r.Dearer)
		}
		if ratio > 0.70 || r.Billed.Sent > offSent*(1+1e-9) {
			t.Errorf("%s: billed %.3f of raw, compaction off %.3f (pass-through reasons %v)", f.Name, ratio, offSent/r.Billed.Raw, r.Reasons)
		}
	}
	if n == 0 {
		t.Skip("no step sessions in the corpus")
	}
}

// compactionOnOff returns two compilers with the replay's defaults, each on
// a fresh vault: compaction on, and compaction off.
func compactionOnOff(t *testing.T) (on, off *compiler.Compiler) {
	t.Helper()
	on, err := compiler.New(DefaultOptions(), compilertest.NewMemStore(), nil)
	if err != nil {
		t.Fatal(err)
	}
	offOpts := DefaultOptions()
	offOpts.Compaction.Enabled = false
	if off, err = compiler.New(offOpts, compilertest.NewMemStore(), nil); err != nil {
		t.Fatal(err)
	}
	return on, off
}
