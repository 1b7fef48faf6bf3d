package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"

	"github.com/tokenterminator/caddy-token-terminator/compiler"
	"github.com/tokenterminator/caddy-token-terminator/cost"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/recovery"
	"github.com/tokenterminator/caddy-token-terminator/response"
)

// ToolRecovery is the gateway's default recovery (recovery tool): the
// receipts' hint and the tool definitions.
func ToolRecovery() compiler.Recovery {
	return compiler.Recovery{Hint: recovery.ToolName + " artifact_get", ToolName: recovery.ToolName,
		Tools: compiler.ToolDefinitions{
			Chat:      string(recovery.Definition(response.FormatChat)),
			Responses: string(recovery.Definition(response.FormatResponses)),
			Anthropic: string(recovery.Definition(response.FormatAnthropic)),
		}}
}

// RecoveryRow is the recovery figures of one session's replay.
type RecoveryRow struct {
	Name      string
	Steps     int
	Receipts  int     // receipts forwarded
	WithTool  int     // forwarded requests that carried the tool
	ToolBytes int     // bytes the definitions (and hints) added, summed over the steps
	Recovered int     // artifacts the simulated model recovered
	Reinlined int     // characters of recovered artifacts carried inline again by the next step
	Sent      int     // bytes forwarded with the tool
	SentOff   int     // bytes forwarded with recovery off
	Billed    Billed  // billed raw / sent with the tool
	BilledOff float64 // billed sent with recovery off
}

var receiptIDOf = regexp.MustCompile(`\[Token Terminator artifact (a_[0-9a-f]{32})`)

// ReplayRecovery replays a session with the tool (with) and without
// recovery (off), each as its own tenant. Every recoverEvery-th step (0:
// never) the simulated model recovers every artifact the forwarded body
// receipts; the next step then carries them inline again, which is
// counted.
func ReplayRecovery(with, off *compiler.Compiler, arts recovery.Artifacts, s fixtures.CorpusFile, clock Clock, recoverEvery int) RecoveryRow {
	row := RecoveryRow{Name: s.Name, Steps: len(s.Requests)}
	var cfg cost.Config
	var rawSim, sentSim, offSim *cost.Simulator
	tenant := "replay/recovery/" + s.Name
	var pending []compiler.Digest // recovered by the last step
	for i, req := range s.Requests {
		at := clock.At(i)
		ctx := context.Background()
		res := with.Compile(ctx, compiler.Request{Path: req.Path, Body: req.Body, Mode: compiler.ModeEnforce, Time: at,
			Scope: compiler.Scope{Tenant: tenant}, DeferCommit: true})
		ro := off.Compile(ctx, compiler.Request{Path: req.Path, Body: req.Body, Mode: compiler.ModeEnforce, Time: at,
			Scope: compiler.Scope{Tenant: tenant + "/off"}})
		if rawSim == nil {
			m := cfg.Model(s.Format, modelOf(req.Body))
			rawSim, sentSim, offSim = &cost.Simulator{Model: m, Config: cfg}, &cost.Simulator{Model: m, Config: cfg}, &cost.Simulator{Model: m, Config: cfg}
		}
		for _, d := range pending {
			if !bytes.Contains(res.Body, []byte(compiler.ArtifactID(d))) {
				if a, ok, err := arts.Get(ctx, tenant, d); err == nil && ok {
					row.Reinlined += a.Chars
				}
			}
		}
		pending = nil
		row.Receipts += res.Receipts
		if res.RecoveryTool {
			row.WithTool++
			row.ToolBytes += len(res.Body) - len(compiler.WithoutRecovery(req.Body, res.Body))
		}
		if recoverEvery > 0 && (i+1)%recoverEvery == 0 && res.RecoveryTool {
			for _, m := range receiptIDOf.FindAllSubmatch(res.Body, -1) {
				if d, ok, err := arts.Resolve(ctx, tenant, string(m[1])); err == nil && ok {
					pending = append(pending, d)
				}
			}
			row.Recovered += len(pending)
			res.Recovered(pending...)
		}
		if res.Commit != nil {
			res.Commit()
		}
		row.Sent += len(res.Body)
		row.SentOff += len(ro.Body)
		row.Billed.Raw += rawSim.Step(cost.Render(s.Format, req.Body), at).Cost
		row.Billed.Sent += sentSim.Step(cost.Render(s.Format, res.Body), at).Cost
		row.BilledOff += offSim.Step(cost.Render(s.Format, ro.Body), at).Cost
	}
	return row
}

// PrintRecovery writes the recovery rows as a Markdown table with a total.
func PrintRecovery(w io.Writer, rows []RecoveryRow) {
	fmt.Fprintln(w, "| session | steps | receipts | with tool | tool+hint bytes | sent bytes | sent bytes recovery off | recovered | re-inlined chars | billed sent | billed sent recovery off | sent/raw | sent/raw recovery off |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var tot RecoveryRow
	for _, r := range rows {
		printRecoveryRow(w, shortName(r.Name), r)
		tot.Steps += r.Steps
		tot.Receipts += r.Receipts
		tot.WithTool += r.WithTool
		tot.ToolBytes += r.ToolBytes
		tot.Sent += r.Sent
		tot.SentOff += r.SentOff
		tot.Recovered += r.Recovered
		tot.Reinlined += r.Reinlined
		tot.Billed.Raw += r.Billed.Raw
		tot.Billed.Sent += r.Billed.Sent
		tot.BilledOff += r.BilledOff
	}
	printRecoveryRow(w, "**total**", tot)
}

func printRecoveryRow(w io.Writer, name string, r RecoveryRow) {
	fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %.0f | %.0f | %.3f | %.3f |\n",
		name, r.Steps, r.Receipts, r.WithTool, r.ToolBytes, r.Sent, r.SentOff, r.Recovered, r.Reinlined,
		r.Billed.Sent, r.BilledOff, ratio(r.Billed.Sent, r.Billed.Raw), ratio(r.BilledOff, r.Billed.Raw))
}
