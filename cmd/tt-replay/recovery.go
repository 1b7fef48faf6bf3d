package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
	"github.com/tokenterminator/caddy-token-terminator/internal/gateway"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
)

// ToolRecovery is the gateway's default recovery (recovery tool): the
// receipts' hint and the tool definitions, wired as the gateway wires them.
func ToolRecovery() compiler.Recovery {
	return gateway.CompilerRecovery(gateway.RecoveryTool, recovery.Config{}.WithDefaults())
}

// RecoveryRow is the recovery figures of one session's replay.
type RecoveryRow struct {
	Name      string
	Steps     int
	Receipts  int     // receipts forwarded
	WithTool  int     // forwarded requests that carried the tool
	Dropped   int     // requests after the tool's first appearance that went out without it (toggles)
	ToolBytes int     // bytes the definitions (and hints) added, summed over the steps
	Recovered int     // artifacts the simulated model recovered
	Reinlined int     // characters of recovered artifacts carried inline again by the next step
	Sent      int     // bytes forwarded with the tool
	SentOff   int     // bytes forwarded with recovery off
	Rounds    int     // recovery rounds: follow-up requests the gateway sent for the simulated model
	Billed    Billed  // billed raw / sent with the tool (the client's requests)
	BilledRnd float64 // billed for the recovery rounds' follow-up requests
	BilledOff float64 // billed sent with recovery off
}

var receiptIDOf = regexp.MustCompile(`\[Token Terminator artifact (a_[0-9a-f]{32})`)

// ReplayRecovery replays a session with the tool (with) and without
// recovery (off), each as its own tenant. Every recoverEvery-th step (0:
// never) the simulated model recovers every artifact the forwarded body
// receipts, in one recovery round: the follow-up request the gateway would
// send (the forwarded body, the model's calls and their results) is billed
// like any step. The next step's decision then either carries them inline
// again (counted as re-inlined) or keeps the receipts.
//
// tag keeps the tenants of replays with different compilers apart.
func ReplayRecovery(with, off *compiler.Compiler, arts recovery.Artifacts, s fixtures.CorpusFile, clock Clock, recoverEvery int, tag string) RecoveryRow {
	row := RecoveryRow{Name: s.Name, Steps: len(s.Requests)}
	var cfg cost.Config
	var rawSim, sentSim, offSim *cost.Simulator
	tenant := "replay/recovery/" + tag + s.Name
	var pending []artifact.Digest // recovered by the last step
	for i, req := range s.Requests {
		at := clock.At(i)
		ctx := context.Background()
		res := with.Compile(ctx, compiler.Request{Path: req.Path, Body: req.Body, Mode: compiler.ModeEnforce, Time: at,
			Scope: artifact.Scope{Tenant: tenant}, DeferCommit: true})
		ro := off.Compile(ctx, compiler.Request{Path: req.Path, Body: req.Body, Mode: compiler.ModeEnforce, Time: at,
			Scope: artifact.Scope{Tenant: tenant + "/off"}})
		if rawSim == nil {
			m := cfg.Model(provider.Format(s.Format), modelOf(req.Body))
			rawSim, sentSim, offSim = &cost.Simulator{Model: m, Config: cfg}, &cost.Simulator{Model: m, Config: cfg}, &cost.Simulator{Model: m, Config: cfg}
		}
		for _, d := range pending {
			if !bytes.Contains(res.Body, []byte(artifact.ID(d))) {
				if a, ok, err := arts.Get(ctx, tenant, d); err == nil && ok {
					row.Reinlined += a.Chars
				}
			}
		}
		pending = nil
		row.Receipts += res.Receipts
		if row.WithTool > 0 && !res.RecoveryTool {
			row.Dropped++
		}
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
		row.Billed.Raw += rawSim.Step(cost.Render(provider.Format(s.Format), req.Body), at).Cost
		row.Billed.Sent += sentSim.Step(cost.Render(provider.Format(s.Format), res.Body), at).Cost
		row.BilledOff += offSim.Step(cost.Render(provider.Format(s.Format), ro.Body), at).Cost
		if len(pending) > 0 {
			if body, err := recoveryRound(ctx, arts, tenant, provider.Format(s.Format), res.Body, pending); err == nil {
				row.Rounds++
				row.BilledRnd += sentSim.Step(cost.Render(provider.Format(s.Format), body), at).Cost
			}
		}
	}
	return row
}

// recoveryRound is the follow-up request of a round in which the model
// calls the tool once for each of ds, whole: body with the model's turn and
// the tool's results appended (recovery.FollowUp), as the gateway sends it.
func recoveryRound(ctx context.Context, arts recovery.Artifacts, tenant string, format provider.Format, body []byte, ds []artifact.Digest) ([]byte, error) {
	cfg := recovery.Config{MaxPageChars: compiler.DefaultMaxArtifactChars}
	var calls []recovery.Call
	var items []string
	for i, d := range ds {
		args := fmt.Sprintf(`{"action":"artifact_get","artifact_id":%q,"limit":%d}`, artifact.ID(d), compiler.DefaultMaxArtifactChars)
		id := fmt.Sprintf("tt_replay_%d", i)
		calls = append(calls, recovery.Call{ID: id, Args: []byte(args), Result: recovery.ExecuteWith(ctx, cfg, arts, tenant, []byte(args))})
		q := strconv.Quote(args)
		switch format {
		case provider.Chat:
			items = append(items, `{"id":"`+id+`","type":"function","function":{"name":"`+recovery.ToolName+`","arguments":`+q+`}}`)
		case provider.Responses:
			items = append(items, `{"type":"function_call","call_id":"`+id+`","name":"`+recovery.ToolName+`","arguments":`+q+`}`)
		case provider.Gemini:
			items = append(items, `{"functionCall":{"id":"`+id+`","name":"`+recovery.ToolName+`","args":`+args+`}}`)
		default:
			items = append(items, `{"type":"tool_use","id":"`+id+`","name":"`+recovery.ToolName+`","input":`+args+`}`)
		}
	}
	list := strings.Join(items, ",")
	var answer string
	switch format {
	case provider.Chat:
		answer = `{"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[` + list + `]},"finish_reason":"tool_calls"}]}`
	case provider.Responses:
		answer = `{"output":[` + list + `]}`
	case provider.Gemini:
		answer = `{"candidates":[{"content":{"role":"model","parts":[` + list + `]},"finishReason":"STOP"}]}`
	default:
		answer = `{"role":"assistant","content":[` + list + `],"stop_reason":"tool_use"}`
	}
	return recovery.FollowUp(format, body, []byte(answer), calls)
}

// PrintRecovery writes the recovery rows as a Markdown table with a total.
func PrintRecovery(w io.Writer, rows []RecoveryRow) {
	fmt.Fprintln(w, "| session | steps | receipts | with tool | dropped | tool+hint bytes | sent bytes | sent bytes recovery off | recovered | rounds | re-inlined chars | billed sent | billed rounds | billed sent recovery off | sent/raw | sent+rounds/raw | sent/raw recovery off |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var tot RecoveryRow
	for _, r := range rows {
		printRecoveryRow(w, shortName(r.Name), r)
		tot.Steps += r.Steps
		tot.Receipts += r.Receipts
		tot.WithTool += r.WithTool
		tot.Dropped += r.Dropped
		tot.ToolBytes += r.ToolBytes
		tot.Sent += r.Sent
		tot.SentOff += r.SentOff
		tot.Recovered += r.Recovered
		tot.Rounds += r.Rounds
		tot.Reinlined += r.Reinlined
		tot.Billed.Raw += r.Billed.Raw
		tot.Billed.Sent += r.Billed.Sent
		tot.BilledOff += r.BilledOff
		tot.BilledRnd += r.BilledRnd
	}
	printRecoveryRow(w, "**total**", tot)
}

func printRecoveryRow(w io.Writer, name string, r RecoveryRow) {
	fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %.0f | %.0f | %.0f | %.3f | %.3f | %.3f |\n",
		name, r.Steps, r.Receipts, r.WithTool, r.Dropped, r.ToolBytes, r.Sent, r.SentOff, r.Recovered, r.Rounds, r.Reinlined,
		r.Billed.Sent, r.BilledRnd, r.BilledOff, ratio(r.Billed.Sent, r.Billed.Raw), ratio(r.Billed.Sent+r.BilledRnd, r.Billed.Raw), ratio(r.BilledOff, r.Billed.Raw))
}
