package gateway

import (
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// outcome is the one record of a candidate request: the response header
// (Token-Terminator), the placeholders, the log line, the metrics and the
// ledger all read it, and each fact in it is noted once. It never holds
// content, tool arguments or credentials: the model is kept only to pick
// its cost model and is recorded as its family, the conversation as a
// keyed id.
type outcome struct {
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
	invalidTotal        uint64 // with invalid_output: refused rewrites since start (read from the metric)
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

	// What the metrics and the ledger add (account.go).
	family       string // provider.ModelLabel of the request's model
	model        string // the request's model as sent: only to pick its cost model, never recorded
	conversation string // the keyed conversation id (Gateway.conversationID)
	kinds        compiler.ReceiptKinds
	billed       *vault.LedgerUsage // the provider's usage priced (usageFigures); nil when none came back
	label        string             // the operator's tenant label, if one matches
	accounted    bool               // counted and queued: a request is accounted once
	hold         holdoutObs         // the request's holdout arm (holdout.go)

	// websocket: a response.create message on a Responses WebSocket
	// (websocket_outcome.go), settled by the provider's terminal event
	// for it rather than by an HTTP answer.
	websocket bool
	// chainTool: a WebSocket continuation the recovery tool was added to
	// for its chain (websocket_chain_tool.go): its own bytes grew by the
	// definition, and its saving is the chain's, not the message's.
	chainTool bool
}

func (o *outcome) passthrough(reason compiler.Reason) {
	o.decision = compiler.Passthrough
	o.reason = reason
}

// fromResult fills the outcome from a compile. raw and sent are the byte
// counts of the original body and of the body actually forwarded.
func (o *outcome) fromResult(res compiler.Result, raw, sent int64, mode compiler.Mode) {
	o.compiled = true
	o.decision = res.Decision
	o.reason = res.Reason
	if res.Format != "" {
		o.format = res.Format
	}
	o.family, o.model, o.kinds = provider.ModelLabel(res.Model), res.Model, res.Kinds
	o.rawBytes = raw
	o.sentBytes = sent
	o.receipts = res.Receipts
	o.costRaw, o.costSent = res.CostRaw, res.CostSent
	o.costHorizonRaw, o.costHorizonSent, o.costHorizon = res.CostHorizonRaw, res.CostHorizonSent, res.CostHorizon
	o.folded = res.Folded
	o.workingState = res.WorkingState
	o.detail = res.Detail
	o.slots = res.Slots
	o.tokens = res.Tokens
	o.parse, o.vault, o.gate, o.compile = res.Parse, res.Vault, res.Gate, res.Total
	switch {
	case mode == compiler.ModeShadow && res.Decision != compiler.Passthrough:
		// shadow reports what would have been sent
		o.decision = compiler.Shadow
		if res.SentBytes > 0 {
			o.sentBytes = int64(res.SentBytes)
		}
	case res.Decision == compiler.Accepted:
	default:
		// Anything but an accepted rewrite forwarded the original.
		o.decision = compiler.Passthrough
		o.receipts, o.folded = 0, 0
		if o.reason == "" {
			o.reason = compiler.ReasonInternal
		}
	}
}

func (o *outcome) decisionString() string {
	switch o.decision {
	case compiler.Passthrough:
		return "passthrough=" + string(o.reason)
	case "":
		return "passthrough=unspecified"
	default:
		return string(o.decision)
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
func (o *outcome) header() string {
	var b strings.Builder
	b.Grow(128)
	b.WriteString(o.decisionString())
	if o.rawBytes >= 0 {
		b.WriteString("; raw_bytes=")
		b.WriteString(strconv.FormatInt(o.rawBytes, 10))
		b.WriteString("; sent_bytes=")
		b.WriteString(strconv.FormatInt(o.sentBytes, 10))
	}
	b.WriteString("; receipts=")
	b.WriteString(strconv.Itoa(o.receipts))
	switch o.tokens.Status {
	case artifact.TokensExact, artifact.TokensEstimate:
		b.WriteString("; raw_tokens=")
		b.WriteString(strconv.Itoa(o.tokens.Raw))
		b.WriteString("; sent_tokens=")
		b.WriteString(strconv.Itoa(o.tokens.Sent))
		if o.tokens.Status == artifact.TokensEstimate {
			b.WriteString("; tokens=estimate")
		}
	case artifact.TokensBudget:
		b.WriteString("; tokens=budget")
	default:
		// No tokenizer applies, or no rewrite was judged: the figures are
		// absent, not guessed.
		b.WriteString("; tokens=none")
	}
	if o.costRaw > 0 {
		b.WriteString("; cost_raw=")
		b.WriteString(strconv.FormatFloat(o.costRaw, 'f', 0, 64))
		b.WriteString("; cost_sent=")
		b.WriteString(strconv.FormatFloat(o.costSent, 'f', 0, 64))
		b.WriteString("; cost_horizon_raw=")
		b.WriteString(strconv.FormatFloat(o.costHorizonRaw, 'f', 0, 64))
		b.WriteString("; cost_horizon_sent=")
		b.WriteString(strconv.FormatFloat(o.costHorizonSent, 'f', 0, 64))
	}
	o.recovery.header(&b)
	return b.String()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// decisionWord is the decision without its reason.
func (o *outcome) decisionWord() compiler.Decision {
	if o.decision == "" {
		return compiler.Passthrough
	}
	return o.decision
}

// fields renders the structured log line, written after the response.
func (o *outcome) fields() []zap.Field {
	f := make([]zap.Field, 0, 32)
	f = append(f,
		zap.String("decision", string(o.decisionWord())),
		zap.String("reason", string(o.reason)),
		zap.String("format", string(o.format)),
		zap.String("path", o.path),
		zap.Int64("raw_bytes", o.rawBytes),
		zap.Int64("sent_bytes", o.sentBytes),
		zap.Int("receipts", o.receipts),
		zap.Int("folded", o.folded),
		zap.Int("slots", o.slots),
	)
	if o.workingState > 0 {
		f = append(f, zap.Int("working_state_chars", o.workingState))
	}
	if o.detail != "" {
		f = append(f, zap.String("detail", o.detail))
	}
	if o.invalidTotal > 0 {
		f = append(f, zap.Uint64("invalid_outputs_total", o.invalidTotal))
	}
	if o.tenant != "" {
		f = append(f, zap.String("tenant", o.tenant))
	}
	if arm := o.hold.arm(); arm != "" {
		f = append(f, zap.String("arm", arm))
	}
	if o.websocket {
		f = append(f, zap.Bool("websocket", true))
	}
	if o.chainTool {
		f = append(f, zap.Bool("chain_tool_added", true))
	}
	if o.tokens.Status != "" {
		f = append(f, zap.String("tokens", string(o.tokens.Status)))
		if o.tokens.Encoding != "" {
			f = append(f, zap.String("token_encoding", o.tokens.Encoding))
		}
		if o.tokens.Status.Measured() {
			f = append(f, zap.Int("raw_tokens", o.tokens.Raw), zap.Int("sent_tokens", o.tokens.Sent))
		}
	}
	f = append(f, zap.Float64("read_ms", ms(o.read)))
	if o.queue >= time.Millisecond/10 {
		f = append(f, zap.Float64("queue_ms", ms(o.queue)))
	}
	if o.compiled {
		f = append(f,
			zap.Float64("parse_ms", ms(o.parse)),
			zap.Float64("vault_ms", ms(o.vault)),
			zap.Float64("gate_ms", ms(o.gate)),
			zap.Float64("compile_ms", ms(o.compile)),
		)
	}
	f = append(f,
		zap.Int("status", o.status),
		zap.Int64("response_bytes", o.responseBytes),
		zap.Bool("committed", o.committed),
	)
	if o.outcome != "" {
		f = append(f, zap.String("outcome", o.outcome))
	}
	f = append(f, usageFields(o.usage)...)
	if o.costRaw > 0 {
		f = append(f, zap.Float64("cost_raw", o.costRaw), zap.Float64("cost_sent", o.costSent),
			zap.Float64("cost_horizon_raw", o.costHorizonRaw), zap.Float64("cost_horizon_sent", o.costHorizonSent),
			zap.Float64("cost_horizon", o.costHorizon))
	}
	f = append(f, o.recovery.fields()...)
	if o.committed {
		f = append(f, zap.Float64("commit_ms", ms(o.commit)))
	}
	f = append(f,
		zap.Float64("upstream_ms", ms(o.upstream)),
		zap.Float64("total_ms", ms(o.total)),
	)
	return f
}
