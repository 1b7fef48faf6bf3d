package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"sync"
	"sync/atomic"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/holdout"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// Holdout is the holdout's settings (a share of conversations held out,
// and the per-label overrides of tenant_settings) and its retry detector.
type Holdout struct {
	Share  holdout.Share            // the gateway's share of held-out conversations
	Shares map[string]holdout.Share // by tenant label, where set
	Modes  map[string]compiler.Mode // by tenant label, where set
	Mins   map[string]int           // min_artifact_chars by tenant label, where set
	last   lastBodies
}

// NewHoldout returns a holdout of share, with no per-label overrides yet.
func NewHoldout(share holdout.Share) *Holdout {
	return &Holdout{Share: share, Shares: map[string]holdout.Share{}, Modes: map[string]compiler.Mode{}, Mins: map[string]int{}}
}

// labelMode is the mode of a tenant's requests: its label's, else the
// handler's.
func (g *Gateway) labelMode(tenant string) compiler.Mode {
	if g.Holdout != nil {
		if m, ok := g.Holdout.Modes[g.tenantLabel(tenant)]; ok {
			return m
		}
	}
	return g.Mode
}

// labelMinArtifactChars is the tenant's label's min_artifact_chars; 0 for
// the handler's.
func (g *Gateway) labelMinArtifactChars(tenant string) int {
	if g.Holdout == nil {
		return 0
	}
	return g.Holdout.Mins[g.tenantLabel(tenant)]
}

// holdoutShare is the tenant's share of held-out conversations.
func (g *Gateway) holdoutShare(tenant string) holdout.Share {
	if g.Holdout == nil {
		return 0
	}
	if s, ok := g.Holdout.Shares[g.tenantLabel(tenant)]; ok {
		return s
	}
	return g.Holdout.Share
}

// holdoutKey is the assignment's key: a keyed hash under the tenant key,
// so gateways sharing the tenant key (a fleet, a restart) assign alike,
// and nobody without it can compute an arm. The identity hashed holds a
// NUL, which no credential header can, so it is no tenant's id.
func (g *Gateway) holdoutKey() []byte {
	if g.Tenants == nil {
		return nil
	}
	return []byte(g.Tenants("token-terminator\x00holdout"))
}

// Arm states of a request (holdoutNote).
const (
	armNone uint32 = iota
	armTreatment
	armControl
	armControlSkipped // control, and its shadow compile was skipped under load
)

// holdoutNote is a request's arm, written by the compile (which may
// outlive the handler's wait for it) and read by the handler.
type holdoutNote struct {
	state        *atomic.Uint32 // nil: no holdout for the request
	conversation string
}

// load is the request's arm state.
func (n *holdoutNote) load() uint32 {
	if n.state == nil {
		return armNone
	}
	return n.state.Load()
}

// arm is the arm's name for the ledger and metrics; "" when the request
// has none (no holdout, or its conversation key was never known).
func (n *holdoutNote) arm() string {
	switch n.load() {
	case armTreatment:
		return holdout.Treatment.String()
	case armControl, armControlSkipped:
		return holdout.Control.String()
	}
	return ""
}

func (n *holdoutNote) control() bool {
	s := n.load()
	return s == armControl || s == armControlSkipped
}

// holdoutHook is the compiler's Request.Holdout for a tenant's request:
// nil without a holdout. A control conversation compiles in shadow (what
// treatment would have sent; nothing is stored, and its lineage records
// the original it forwarded, in its own conversation only), or not at all
// when busy (every compile slot was taken when the request arrived): the
// shadow is the first work shed under load, and counted as skipped.
func (g *Gateway) holdoutHook(ex *exchange, tenant string, mode compiler.Mode, busy bool) func(artifact.Digest) compiler.Mode {
	share := g.holdoutShare(tenant)
	if share == 0 {
		return nil
	}
	key := g.holdoutKey()
	if len(key) == 0 {
		return nil
	}
	a := holdout.NewAssigner(key, share)
	note := &ex.out.hold
	note.state = new(atomic.Uint32)
	return func(d artifact.Digest) compiler.Mode {
		conv := g.conversationID(tenant, d)
		if conv == "" {
			return mode
		}
		if a.Arm(tenant, conv) == holdout.Treatment {
			note.state.Store(armTreatment)
			return mode
		}
		if busy {
			note.state.Store(armControlSkipped)
			return compiler.ModeOff
		}
		note.state.Store(armControl)
		return compiler.ModeShadow
	}
}

// settleHoldout adjusts a control request's report after its compile:
// the original went out (passthrough=holdout); the shadow's figures are
// kept apart as the counterfactual. It also notes whether the body is the
// conversation's previous one resent (a client retry). Run once the
// compile has returned (in time or not).
func (g *Gateway) settleHoldout(ex *exchange, res compiler.Result, body []byte) {
	hn := &ex.out.hold
	if hn.load() == armNone {
		return
	}
	hn.conversation = g.conversationID(ex.out.tenant, res.Conversation)
	if hn.conversation != "" && g.Holdout != nil {
		hn.retry = g.Holdout.last.resent(g.holdoutKey(), hn.conversation, body)
	}
	if !hn.control() {
		return
	}
	rep := &ex.out
	if res.Decision == compiler.Shadow {
		hn.shadowSentBytes, hn.shadowCostSent = int64(res.SentBytes), res.CostSent
	}
	hn.shadowSkipped = hn.load() == armControlSkipped
	rep.decision, rep.reason = compiler.Passthrough, compiler.ReasonHoldout
	rep.sentBytes = rep.rawBytes
	rep.receipts, rep.folded, rep.workingState = 0, 0, 0
	rep.costSent, rep.costHorizonSent = rep.costRaw, rep.costHorizonRaw
	if rep.tokens.Status.Measured() {
		rep.tokens.Sent = rep.tokens.Raw
	}
	rep.kinds = compiler.ReceiptKinds{}
	// The provider's usage of a control request calibrates nothing: the
	// compiler's bounded usage notes belong to the conversations it
	// rewrites.
	ex.observe = nil
}

// holdoutObs is what the ledger and metrics record of a request's arm.
type holdoutObs struct {
	holdoutNote
	retry           bool
	shadowSkipped   bool
	shadowSentBytes int64
	shadowCostSent  float64
}

// lastBodies remembers, per conversation, a keyed hash of the last body
// seen, to flag a client's retry (the same body sent again). Bounded: two
// generations of at most lastBodiesMax conversations each; a conversation
// idle for a generation is forgotten (its next request is not a retry).
type lastBodies struct {
	mu       sync.Mutex
	cur, old map[string][16]byte
}

const lastBodiesMax = 1 << 15

// resent reports whether body is the conversation's previous body, and
// remembers it as the new previous one.
func (l *lastBodies) resent(key []byte, conversation string, body []byte) bool {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	var sum [16]byte
	copy(sum[:], m.Sum(nil))
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, ok := l.cur[conversation]
	if !ok {
		prev, ok = l.old[conversation]
	}
	if l.cur == nil || len(l.cur) >= lastBodiesMax {
		l.old, l.cur = l.cur, make(map[string][16]byte)
	}
	l.cur[conversation] = sum
	return ok && prev == sum
}

// full reports whether every compile slot is taken.
func (s CompileSlots) full() bool { return s != nil && len(s) == cap(s) }

// holdoutRecord sets the ledger record's holdout fields.
func holdoutRecord(r *vault.LedgerRecord, o *outcome) {
	hn := &o.hold
	r.Arm = hn.arm()
	if r.Arm == "" {
		return
	}
	r.Retry = hn.retry
	r.ShadowSkipped = hn.shadowSkipped
	r.ShadowSentBytes, r.ShadowCostSent = hn.shadowSentBytes, hn.shadowCostSent
}
