// Package compiler is the deterministic request compiler of Token Terminator.
//
// It takes a provider request body, finds large tool results that the model
// has already seen (in the same request or in an earlier request of the same
// conversation), stores them in a Store and replaces them with short receipts.
// The output is the original bytes with only the replaced JSON values spliced
// in. A strict final gate forwards the rewrite only when it is strictly
// smaller; otherwise the original bytes are returned unchanged.
//
// The package does no I/O of its own: persistence goes through the Store
// interface and token counting through the TokenCounter interface, so it is
// easy to test and to reuse outside Caddy.
package compiler

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// TokenCounter counts tokens of complete request bodies.
type TokenCounter interface {
	Count(ctx context.Context, model string, body []byte) artifact.TokenCount
}

// HintedCounter is a TokenCounter that can use where a body's messages
// start (ascending byte offsets, from the compiler's parse) to look a
// resent message's count up instead of re-reading its bytes. Hints never
// change a count, only how fast it is found; a counter without this method
// is given none.
type HintedCounter interface {
	TokenCounter
	CountHinted(ctx context.Context, model string, body []byte, hints []int) artifact.TokenCount
}

// HeldCounter is a HintedCounter that can read body after CountHeld
// returned (the work it left past its budget goes on and fills its caches)
// under hold instead of from a copy; a nil hold means a copy.
type HeldCounter interface {
	HintedCounter
	CountHeld(ctx context.Context, model string, body []byte, hints []int, hold artifact.Hold) artifact.TokenCount
}

// immutableHold holds bytes that are never reused (the garbage collector
// keeps them for any reader): the compile's own rewrites.
func immutableHold() (func(), bool) { return func() {}, true }

// Mode says what the gateway does with a compiled request.
type Mode string

const (
	ModeEnforce Mode = "enforce" // forward the rewrite when the gate accepts it
	ModeShadow  Mode = "shadow"  // compile and report, forward the original
	ModeOff     Mode = "off"     // do nothing
)

// Decision is the outcome reported for a candidate request.
type Decision string

const (
	Accepted    Decision = "accepted"
	Passthrough Decision = "passthrough"
	Shadow      Decision = "shadow"
)

// Options configures a Compiler. Zero values are replaced by defaults in New.
type Options struct {
	MinArtifactChars int // default 8000
	MaxArtifactChars int // default 2000000
	// InlineLeases is how many forwarded requests of a conversation may
	// carry an artifact inline; 0 turns lease receipts off (same-request
	// duplicates are still receipted). Zero is meaningful, so callers set it
	// explicitly; negative means the default (1).
	InlineLeases int
	// Timeout bounds one compile; past it the original goes out.
	Timeout time.Duration
	// Compaction configures context compaction; see Compaction.
	Compaction Compaction
	// Cost is the billing model every decision is made by: plans that keep
	// the provider's cached prompt prefix are weighed against rewriting it,
	// and the gate refuses a rewrite whose expected billed cost exceeds the
	// original's (not_cheaper). The zero value is the published prices;
	// Cost.Off judges by bytes and tokens only.
	Cost cost.Config
	// Recovery is the receipts' recovery hint and the recovery tool
	// (recovery_tool.go); the zero value offers neither.
	Recovery Recovery
	// WorkAhead: after a request with eligible results but nothing to
	// replace, its body is counted (precount.go) and its results are
	// written (prestore.go) in the background, so the next request of the
	// conversation, which receipts them, finds that work done. The gateway
	// sets it; it is off by default so a Compiler does nothing after
	// Compile returns unless asked.
	WorkAhead bool
	// WorkingStateChars bounds the working-state block added to a rewrite
	// that carries receipts or folds (working_state.go); 0 adds none.
	WorkingStateChars int
	// ReinlineRecovered is what happens to an artifact the model recovered
	// while answering the previous forwarded request (Result.Recovered):
	// ReinlineOn (the default, ""), ReinlineCost or ReinlineOff.
	ReinlineRecovered string
	// ExcludeTools names tools whose results are never replaced: no
	// receipt, no compaction, no fold of a turn that holds one
	// (exclude.go).
	ExcludeTools []string
}

// ReinlineRecovered values (Options.ReinlineRecovered).
const (
	// ReinlineOn: the next request of the conversation carries every
	// recovered tool result inline in every plan, wherever it is (no plan
	// replays its receipt or vaults it with old turns; an older copy in the
	// same request is still a same_as receipt of the inline one), so the
	// model does not pay a recovery round for it again. Its lease starts
	// over: it stays inline for InlineLeases requests. Whether that costs
	// more than keeping the receipt is not weighed; the final gate still
	// judges the whole payload against the original (which carries it
	// inline too). A recovered folded turn stays folded, weighed as with
	// ReinlineCost.
	ReinlineOn = "on"
	// ReinlineCost: the lease starts over, and the cost decision weighs
	// carrying it inline (a rewritten prefix, more bytes on later requests)
	// against keeping the receipt and paying the recovery round the model
	// is expected to ask for again.
	ReinlineCost = "cost"
	// ReinlineOff: a recovery changes nothing: leases count on as if the
	// artifact had not been recovered, and no decision expects a round.
	ReinlineOff = "off"
)

// Request is one candidate provider request.
type Request struct {
	Path  string // URL path; selects the format by suffix
	Body  []byte // complete body; never modified
	Scope artifact.Scope
	Mode  Mode
	// Time is when the request goes upstream, for the prompt cache's TTL;
	// zero means now.
	Time time.Time
	// DeferCommit returns the lineage record as Result.Commit instead of
	// writing it: a gateway commits only once the provider has answered, so
	// a request it rejected never counts as an inline delivery.
	DeferCommit bool
	// Done, when set, is called once when the compile's own work has
	// stopped: before Compile returns when it finishes in time, and later,
	// when it does, for a compile Compile gave up on at its timeout (which
	// goes on reading Body and holding its working memory until then). The
	// gateway returns the compile's memory reservation there.
	Done func()
	// Scratch, when set, is memory the compile may reuse from an earlier
	// one (its parse trees). Its owner resets it once it is done with the
	// request, as it keeps Body until then: the Result's Commit and
	// Recovered hold the plan, whose texts can decode from those trees.
	Scratch *Scratch
	// Hold, when set, keeps Body from reuse for readers that outlive
	// Compile: the token counter's workers, which finish counting past the
	// budget (nil: they copy what they read).
	Hold artifact.Hold
	// KeyID, when set, names every artifact of the request by
	// KeyID(content identity) instead of its content identity: receipts,
	// the working state, the recovery tool and the Store all see the keyed
	// ids. It must be deterministic per tenant (prompt caches, retries)
	// and is the gateway's HMAC under the tenant's key (internal/seal).
	KeyID func(artifact.Digest) artifact.Digest
	// MinArtifactChars, when positive, replaces Options.MinArtifactChars
	// for this request (a per-tenant setting of the gateway).
	MinArtifactChars int
	// Holdout, when set, is asked the mode of the request once its
	// conversation key (Result.Conversation) is known and before the
	// vault is asked anything: the request's own Mode for a treatment
	// conversation, ModeShadow for a control one (what treatment would
	// have sent; nothing stored), or ModeOff to stop there
	// (passthrough=holdout) (holdout.go).
	Holdout func(conversation artifact.Digest) Mode
	// Continues, when set, names the node of the response a
	// previous_response_id body continues, continued through that
	// response's output (Continue): the body's record extends it, so the
	// next whole history finds what it delivered (continuation.go). nil,
	// or a node the Store does not hold: the body is compiled on its own.
	Continues *Chain
	// Chained: the body travels where a continuation may extend its
	// chain (a socket), so its lineage node is looked up and recorded
	// even without an eligible slot, and named in Result.Chain.
	Chained bool
	// HeldInline, for a body naming previous_response_id, lists the
	// (keyed) artifacts the provider holds inline in that response's
	// context: the Result.Inline of the chain's last whole body and of
	// each continuation since. An unanswered result among them may be
	// leased (continuation_lease.go); ignored for any other body.
	HeldInline []artifact.Digest
}

// Scratch is memory that serves one compile after another: the parse
// trees of a request, a large part of what a warm compile allocates. The zero
// value is ready; it serves one compile at a time.
type Scratch struct {
	trees *jsonv.Arena
	// busy is set while a compile uses the trees: one abandoned at its
	// timeout goes on parsing after Compile returned, and a Reset then
	// lets its memory go instead of overwriting it.
	busy atomic.Bool
}

// Reset makes the memory available to the next compile: the trees of the
// last one are overwritten. It keeps at most about keep bytes.
func (s *Scratch) Reset(keep int) { s.reset(keep, false) }

// ResetPoisoned is Reset for tests: a tree read after it fails loudly
// instead of reading the next compile's values.
func (s *Scratch) ResetPoisoned(keep int) { s.reset(keep, true) }

func (s *Scratch) reset(keep int, poison bool) {
	switch {
	case s.busy.Load():
		s.trees = nil // the compile keeps its own; the next one gets new memory
	case s.trees == nil:
	case poison:
		s.trees.ResetPoisoned(keep)
	default:
		s.trees.Reset(keep)
	}
}

// Bytes is the memory the scratch holds.
func (s *Scratch) Bytes() int {
	if s == nil || s.trees == nil {
		return 0
	}
	return s.trees.Bytes()
}

// take lends the trees to a compile until its release.
func (s *Scratch) take() (trees *jsonv.Arena, release func()) {
	if s == nil {
		return nil, func() {}
	}
	if s.trees == nil {
		s.trees = new(jsonv.Arena)
	}
	s.busy.Store(true)
	return s.trees, func() { s.busy.Store(false) }
}

// Result is the outcome of a compile. Body is what must be forwarded: the
// original slice itself on pass-through.
type Result struct {
	Body     []byte
	Decision Decision
	Reason   Reason // pass-through reason, empty when accepted
	// Detail is the store's error behind vault_error / vault_full, for the
	// log: it names digests, sizes and paths, never content.
	Detail string
	Format provider.Format

	RawBytes  int
	SentBytes int
	Receipts  int // receipts in the forwarded body (or that would be, in shadow)
	Folded    int // old turns folded into summaries
	Slots     int // eligible tool results seen
	// Kinds splits Receipts by why each was made; Folded counts the
	// folded-turn receipts.
	Kinds ReceiptKinds
	// Model is the request's model name as sent, for the gateway to
	// normalize (caddymodule metrics): never a metric label or log field
	// as is. Empty when the body did not parse.
	Model string
	// Conversation is the chain hash of the request's opening: its units
	// up to and including the person's first own input (conversationKey),
	// the same for every request of a conversation from its first one on.
	// Unkeyed: the gateway keys it before it is stored. Zero when the body
	// did not parse or holds no unit.
	Conversation artifact.Digest

	Tokens TokenReport

	// Expected billed input cost in base-input-token units (cost package):
	// of the original as if every request of the conversation had gone out
	// raw, and of what was sent (the original on pass-through). Zero
	// with Cost.Off, and for requests that were not compiled.
	CostRaw    float64
	CostSent   float64
	usageKey   string  // the forwarded request's conversation node, for ObserveUsage
	expectRead float64 // tokens the decision expected the provider to read from its cache

	// The third veto's figures (plan_choice.go): the expected billed cost
	// of forwarding the original and of what was sent, each with the
	// provider's cache as the conversation left it, over the same horizon:
	// this request plus reading its prompt back on each of the CostHorizon
	// following requests (what those add is the same for both, so it is
	// left out). A rewrite goes out only if CostHorizonSent <=
	// CostHorizonRaw; on pass-through the two are equal.
	CostHorizonRaw, CostHorizonSent float64
	CostHorizon                     float64

	Parse, Vault, Total time.Duration
	// Gate is the final gate's time (bytes, tokens, cost), inside Total;
	// zero when no rewrite reached the gate.
	Gate time.Duration
	// WorkingState is the characters of the working-state block the
	// rewrite carries (Options.WorkingStateChars); 0 when none.
	WorkingState int

	// Commit writes the lineage record of the request (its inline
	// deliveries) when Request.DeferCommit was set; nil when there is
	// nothing to record or the compile was abandoned. Call it at most once,
	// only after the provider accepted the forwarded body; it does not use
	// the compile's context and is bounded by its own timeout.
	Commit func()
	// Chain names the lineage node Commit records (zero when none), for
	// a continuation of the response to extend (Continue,
	// Request.Continues).
	Chain Chain
	// Inline lists the (keyed) artifacts of the eligible results Body
	// carries inline, each once: for the next continuation's
	// Request.HeldInline. Set for a Chained request only; nil when the
	// compile stopped before its plan.
	Inline []artifact.Digest

	// RecoveryTool: the forwarded body carries the recovery tool
	// (Options.Recovery), so the provider's answer may call it.
	// ToolConflict: the client's tools already name it; none was offered.
	RecoveryTool, ToolConflict bool
	// Recovered notes artifacts the model recovered while answering this
	// request; call it before Commit. The lineage then treats them as
	// never delivered, so the next InlineLeases requests of the
	// conversation carry them inline again. Nil when Commit is.
	Recovered func(digests ...artifact.Digest)
	// Reachable lists the artifacts the recovery tool may serve while the
	// provider answers this request (set when RecoveryTool is): those a
	// forwarded request of its conversation (its lineage, this request
	// included) named in a receipt or a folded turn, or carried inline.
	// This request's first, newest named first; then the lineage's others
	// in digest order. Nothing else of the tenant is the model's to read.
	Reachable []artifact.Digest
}

// ReceiptKinds counts a request's tool-result receipts by their cause.
// Duplicate + Lease + Compaction = Result.Receipts.
type ReceiptKinds struct {
	Duplicate  int // another copy of the same result is in the request
	Lease      int // the conversation already delivered it inline_leases times
	Compaction int // an old result vaulted by context compaction
}

// TokenReport holds the token figures of the gate for one request.
type TokenReport struct {
	Status   artifact.TokenStatus // as TokenCount.Status; "" when not measured
	Encoding string
	Raw      int
	Sent     int
}

// Compaction configures context compaction (old tool results vaulted, old
// turns folded into summaries). It is not defaulted by New: zero turn counts
// are meaningful, so callers set every field.
type Compaction struct {
	Enabled            bool
	MinVaultChars      int // tool results at least this long outside the recent window are vaulted (>= 500)
	CollapseAfterTurns int // turns older than this many most recent are folded; 0 = never fold
	InlineRecentTurns  int // the last this many turns are never changed
}

// countHinted counts body with hints and hold when tc can use them.
func countHinted(ctx context.Context, tc TokenCounter, model string, body []byte, hints []int, hold artifact.Hold) artifact.TokenCount {
	switch hc := tc.(type) {
	case HeldCounter:
		return hc.CountHeld(ctx, model, body, hints, hold)
	case HintedCounter:
		return hc.CountHinted(ctx, model, body, hints)
	}
	return tc.Count(ctx, model, body)
}
