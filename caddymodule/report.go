package caddymodule

import (
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// report is what the handler tells the client (Token-Terminator header) and
// the log about one candidate request. It never holds content, tool
// arguments or credentials.
type report struct {
	decision compiler.Decision
	reason   compiler.Reason
	format   provider.Format
	path     string
	tenant   string // keyed hash, never the credential

	rawBytes, sentBytes int64 // -1 when unknown (streamed body of unknown length)
	receipts, slots     int
	folded              int    // old turns folded into summaries
	workingState        int    // characters of the working-state block sent
	detail              string // the store's error behind vault_error (no content)
	invalidTotal        uint64 // with invalid_output: refused rewrites since start
	tokens              compiler.TokenReport
	compiled            bool
	// Expected billed input cost (base-input-token units) of the original
	// and of what was sent; zero when not modelled.
	costRaw, costSent float64
	// The same over the decision's horizon (the third veto's figures:
	// compiler.Result.CostHorizonRaw/CostHorizonSent) and its length.
	costHorizonRaw, costHorizonSent, costHorizon float64

	read, parse, vault, gate, compile, total time.Duration
	queue                                    time.Duration // waiting for a compile slot

	// The provider's answer, known once next has returned.
	status        int   // the status the client got (clientStatus)
	written       int   // the status written through the handler, 0 when none: the provider's answer
	responseBytes int64 // body bytes the client was sent
	upstream      time.Duration
	outcome       string // "" when next returned no error; "error" or "client_abort"
	usage         provider.Usage
	committed     bool // the lineage was recorded (provider answered 2xx)
	commit        time.Duration

	recovery recoveryReport // recovery.go
}

func (rep *report) passthrough(reason compiler.Reason) {
	rep.decision = compiler.Passthrough
	rep.reason = reason
}

// fromResult fills the report from a compile. raw and sent are the byte
// counts of the original body and of the body actually forwarded.
func (rep *report) fromResult(res compiler.Result, raw, sent int64, mode compiler.Mode) {
	rep.compiled = true
	rep.decision = res.Decision
	rep.reason = res.Reason
	if res.Format != "" {
		rep.format = res.Format
	}
	rep.rawBytes = raw
	rep.sentBytes = sent
	rep.receipts = res.Receipts
	rep.costRaw, rep.costSent = res.CostRaw, res.CostSent
	rep.costHorizonRaw, rep.costHorizonSent, rep.costHorizon = res.CostHorizonRaw, res.CostHorizonSent, res.CostHorizon
	rep.folded = res.Folded
	rep.workingState = res.WorkingState
	rep.detail = res.Detail
	rep.slots = res.Slots
	rep.tokens = res.Tokens
	rep.parse, rep.vault, rep.gate, rep.compile = res.Parse, res.Vault, res.Gate, res.Total
	switch {
	case mode == compiler.ModeShadow && res.Decision != compiler.Passthrough:
		// shadow reports what would have been sent
		rep.decision = compiler.Shadow
		if res.SentBytes > 0 {
			rep.sentBytes = int64(res.SentBytes)
		}
	case res.Decision == compiler.Accepted:
	default:
		// Anything but an accepted rewrite forwarded the original.
		rep.decision = compiler.Passthrough
		rep.receipts, rep.folded = 0, 0
		if rep.reason == "" {
			rep.reason = compiler.ReasonInternal
		}
	}
}

func (rep *report) decisionString() string {
	switch rep.decision {
	case compiler.Passthrough:
		return "passthrough=" + string(rep.reason)
	case "":
		return "passthrough=unspecified"
	default:
		return string(rep.decision)
	}
}

// header renders the Token-Terminator response header value:
//
//	<decision>; raw_bytes=N; sent_bytes=N; receipts=N[; raw_tokens=N; sent_tokens=N[; tokens=estimate]][; cost_raw=N; cost_sent=N; cost_horizon_raw=N; cost_horizon_sent=N]
//
// cost_raw/cost_sent are this request's expected billed cost (the original
// as if the conversation had gone out raw, and what was sent);
// cost_horizon_raw/cost_horizon_sent are the third veto's: the original and
// what was sent over the decision's horizon, from the cache as it is.
//
// or with "; tokens=none" / "; tokens=budget" when no count applies.
// Byte counts of a streamed body of unknown length are omitted.
func (rep *report) header() string {
	var b strings.Builder
	b.Grow(128)
	b.WriteString(rep.decisionString())
	if rep.rawBytes >= 0 {
		b.WriteString("; raw_bytes=")
		b.WriteString(strconv.FormatInt(rep.rawBytes, 10))
		b.WriteString("; sent_bytes=")
		b.WriteString(strconv.FormatInt(rep.sentBytes, 10))
	}
	b.WriteString("; receipts=")
	b.WriteString(strconv.Itoa(rep.receipts))
	switch rep.tokens.Status {
	case artifact.TokensExact, artifact.TokensEstimate:
		b.WriteString("; raw_tokens=")
		b.WriteString(strconv.Itoa(rep.tokens.Raw))
		b.WriteString("; sent_tokens=")
		b.WriteString(strconv.Itoa(rep.tokens.Sent))
		if rep.tokens.Status == artifact.TokensEstimate {
			b.WriteString("; tokens=estimate")
		}
	case artifact.TokensBudget:
		b.WriteString("; tokens=budget")
	default:
		// No tokenizer applies, or no rewrite was judged: the figures are
		// absent, not guessed.
		b.WriteString("; tokens=none")
	}
	if rep.costRaw > 0 {
		b.WriteString("; cost_raw=")
		b.WriteString(strconv.FormatFloat(rep.costRaw, 'f', 0, 64))
		b.WriteString("; cost_sent=")
		b.WriteString(strconv.FormatFloat(rep.costSent, 'f', 0, 64))
		b.WriteString("; cost_horizon_raw=")
		b.WriteString(strconv.FormatFloat(rep.costHorizonRaw, 'f', 0, 64))
		b.WriteString("; cost_horizon_sent=")
		b.WriteString(strconv.FormatFloat(rep.costHorizonSent, 'f', 0, 64))
	}
	rep.recovery.header(&b)
	return b.String()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// decisionWord is the decision without its reason.
func (rep *report) decisionWord() compiler.Decision {
	if rep.decision == "" {
		return compiler.Passthrough
	}
	return rep.decision
}

// fields renders the structured log line, written after the response.
func (rep *report) fields() []zap.Field {
	f := make([]zap.Field, 0, 32)
	f = append(f,
		zap.String("decision", string(rep.decisionWord())),
		zap.String("reason", string(rep.reason)),
		zap.String("format", string(rep.format)),
		zap.String("path", rep.path),
		zap.Int64("raw_bytes", rep.rawBytes),
		zap.Int64("sent_bytes", rep.sentBytes),
		zap.Int("receipts", rep.receipts),
		zap.Int("folded", rep.folded),
		zap.Int("slots", rep.slots),
	)
	if rep.workingState > 0 {
		f = append(f, zap.Int("working_state_chars", rep.workingState))
	}
	if rep.detail != "" {
		f = append(f, zap.String("detail", rep.detail))
	}
	if rep.invalidTotal > 0 {
		f = append(f, zap.Uint64("invalid_outputs_total", rep.invalidTotal))
	}
	if rep.tenant != "" {
		f = append(f, zap.String("tenant", rep.tenant))
	}
	if rep.tokens.Status != "" {
		f = append(f, zap.String("tokens", string(rep.tokens.Status)))
		if rep.tokens.Encoding != "" {
			f = append(f, zap.String("token_encoding", rep.tokens.Encoding))
		}
		if rep.tokens.Status.Measured() {
			f = append(f, zap.Int("raw_tokens", rep.tokens.Raw), zap.Int("sent_tokens", rep.tokens.Sent))
		}
	}
	f = append(f, zap.Float64("read_ms", ms(rep.read)))
	if rep.queue >= time.Millisecond/10 {
		f = append(f, zap.Float64("queue_ms", ms(rep.queue)))
	}
	if rep.compiled {
		f = append(f,
			zap.Float64("parse_ms", ms(rep.parse)),
			zap.Float64("vault_ms", ms(rep.vault)),
			zap.Float64("gate_ms", ms(rep.gate)),
			zap.Float64("compile_ms", ms(rep.compile)),
		)
	}
	f = append(f,
		zap.Int("status", rep.status),
		zap.Int64("response_bytes", rep.responseBytes),
		zap.Bool("committed", rep.committed),
	)
	if rep.outcome != "" {
		f = append(f, zap.String("outcome", rep.outcome))
	}
	f = append(f, usageFields(rep.usage)...)
	if rep.costRaw > 0 {
		f = append(f, zap.Float64("cost_raw", rep.costRaw), zap.Float64("cost_sent", rep.costSent),
			zap.Float64("cost_horizon_raw", rep.costHorizonRaw), zap.Float64("cost_horizon_sent", rep.costHorizonSent),
			zap.Float64("cost_horizon", rep.costHorizon))
	}
	f = append(f, rep.recovery.fields()...)
	if rep.committed {
		f = append(f, zap.Float64("commit_ms", ms(rep.commit)))
	}
	f = append(f,
		zap.Float64("upstream_ms", ms(rep.upstream)),
		zap.Float64("total_ms", ms(rep.total)),
	)
	return f
}
