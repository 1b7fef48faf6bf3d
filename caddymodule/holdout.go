package caddymodule

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/holdout"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// HoldoutSettings are the holdout (a share of whole conversations sent
// as the client wrote them, to measure the gateway against), the tools
// whose results are never replaced, and the settings an operator sets per
// tenant label.
type HoldoutSettings struct {
	// Share of conversations held out as the control arm, as a
	// percentage ("5%", "0.5"): their requests go out byte for byte as
	// the client sent them, while the compiler runs in shadow to learn
	// what it would have sent. The arm is a keyed hash of the tenant and
	// the conversation under a key derived from the tenant key, so every
	// gateway of a fleet and every restart agree, and no client can pick
	// its arm. Default: 0 (off).
	Holdout string `json:"holdout,omitempty"`

	// Tools whose results are never replaced by a receipt, vaulted by
	// compaction, or folded with their turn (e.g. memory tools whose
	// results the model must always see). Matched by the name of the call
	// a result answers, exactly.
	ExcludeTools []string `json:"exclude_tools,omitempty"`

	// Settings of the tenants carrying a label (tenant_label), by label:
	// min_artifact_chars, holdout and mode replace the handler's for them.
	LabelSettings map[string]LabelSettings `json:"tenant_settings,omitempty"`

	hold *holdoutRuntime // provisionHoldout
}

// LabelSettings are the per-label overrides of tenant_settings; unset
// fields keep the handler's value.
type LabelSettings struct {
	MinArtifactChars *int   `json:"min_artifact_chars,omitempty"`
	Holdout          string `json:"holdout,omitempty"`
	Mode             string `json:"mode,omitempty"`
}

// holdoutRuntime is the parsed settings and the retry detector.
type holdoutRuntime struct {
	share  holdout.Share
	shares map[string]holdout.Share // by label, where set
	modes  map[string]compiler.Mode
	mins   map[string]int
	last   lastBodies
}

// checkHoldout refuses bad values, naming them.
func (h *Handler) checkHoldout() error {
	if h.Holdout != "" {
		if _, err := holdout.ParseShare(h.Holdout); err != nil {
			return err
		}
	}
	for _, name := range h.ExcludeTools {
		if name == "" || strings.ContainsFunc(name, unicode.IsSpace) {
			return fmt.Errorf("exclude_tools: tool name %q is empty or holds white space", name)
		}
	}
	labels := map[string]bool{}
	for _, l := range h.TenantLabels {
		labels[l] = true
	}
	for label, s := range h.LabelSettings {
		if !labels[label] {
			return fmt.Errorf("tenant_settings %q: no tenant_label carries this label", label)
		}
		if s.Holdout != "" {
			if _, err := holdout.ParseShare(s.Holdout); err != nil {
				return fmt.Errorf("tenant_settings %q: %v", label, err)
			}
		}
		if s.MinArtifactChars != nil && *s.MinArtifactChars < 1 {
			return fmt.Errorf("tenant_settings %q: min_artifact_chars must be at least 1, got %d", label, *s.MinArtifactChars)
		}
		if s.MinArtifactChars != nil && h.MaxArtifactChars != nil && *s.MinArtifactChars > *h.MaxArtifactChars {
			return fmt.Errorf("tenant_settings %q: min_artifact_chars (%d) must not exceed max_artifact_chars (%d)", label, *s.MinArtifactChars, *h.MaxArtifactChars)
		}
		switch compiler.Mode(s.Mode) {
		case "", compiler.ModeEnforce, compiler.ModeShadow, compiler.ModeOff:
		default:
			return fmt.Errorf("tenant_settings %q: mode must be enforce, shadow or off, got %q", label, s.Mode)
		}
		if s.Mode != "" && s.Mode != string(compiler.ModeOff) && h.Mode == string(compiler.ModeOff) {
			return fmt.Errorf("tenant_settings %q: mode %s needs the handler's mode to be enforce or shadow (mode off opens no vault)", label, s.Mode)
		}
	}
	return nil
}

// provisionHoldout parses the checked settings.
func (h *Handler) provisionHoldout() {
	rt := &holdoutRuntime{shares: map[string]holdout.Share{}, modes: map[string]compiler.Mode{}, mins: map[string]int{}}
	rt.share, _ = holdout.ParseShare(h.Holdout)
	for label, s := range h.LabelSettings {
		if s.Holdout != "" {
			rt.shares[label], _ = holdout.ParseShare(s.Holdout)
		}
		if s.Mode != "" {
			rt.modes[label] = compiler.Mode(s.Mode)
		}
		if s.MinArtifactChars != nil {
			rt.mins[label] = *s.MinArtifactChars
		}
	}
	h.hold = rt
}

// labelMode is the mode of a tenant's requests: its label's, else the
// handler's.
func (h *Handler) labelMode(tenant string) compiler.Mode {
	if h.hold != nil {
		if m, ok := h.hold.modes[h.tenantLabel(tenant)]; ok {
			return m
		}
	}
	return compiler.Mode(h.Mode)
}

// labelMinArtifactChars is the tenant's label's min_artifact_chars; 0 for
// the handler's.
func (h *Handler) labelMinArtifactChars(tenant string) int {
	if h.hold == nil {
		return 0
	}
	return h.hold.mins[h.tenantLabel(tenant)]
}

// holdoutShare is the tenant's share of held-out conversations.
func (h *Handler) holdoutShare(tenant string) holdout.Share {
	if h.hold == nil {
		return 0
	}
	if s, ok := h.hold.shares[h.tenantLabel(tenant)]; ok {
		return s
	}
	return h.hold.share
}

// holdoutKey is the assignment's key: a keyed hash under the tenant key,
// so gateways sharing the tenant key (a fleet, a restart) assign alike,
// and nobody without it can compute an arm. The identity hashed holds a
// NUL, which no credential header can, so it is no tenant's id.
func (h *Handler) holdoutKey() []byte {
	if h.tenants == nil {
		return nil
	}
	return []byte(h.tenants("token-terminator\x00holdout"))
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
func (h *Handler) holdoutHook(ex *exchange, tenant string, mode compiler.Mode, busy bool) func(compiler.Digest) compiler.Mode {
	share := h.holdoutShare(tenant)
	if share == 0 {
		return nil
	}
	key := h.holdoutKey()
	if len(key) == 0 {
		return nil
	}
	a := holdout.NewAssigner(key, share)
	note := &ex.obs.hold
	note.state = new(atomic.Uint32)
	return func(d compiler.Digest) compiler.Mode {
		conv := h.conversationID(tenant, d)
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
func (h *Handler) settleHoldout(ex *exchange, res compiler.Result, body []byte) {
	hn := &ex.obs.hold
	if hn.load() == armNone {
		return
	}
	hn.conversation = h.conversationID(ex.rep.tenant, res.Conversation)
	if hn.conversation != "" && h.hold != nil {
		hn.retry = h.hold.last.resent(h.holdoutKey(), hn.conversation, body)
	}
	if !hn.control() {
		return
	}
	rep := &ex.rep
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
	ex.obs.kinds = compiler.ReceiptKinds{}
	ex.obs.costSent = ex.obs.costRaw
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
func (s compileSlots) full() bool { return s != nil && len(s) == cap(s) }

// unmarshalExcludeTools reads `exclude_tools <name…>` (repeatable: the
// names add up).
func (t *Handler) unmarshalExcludeTools(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) == 0 {
		return d.Errf("exclude_tools needs at least one tool name")
	}
	for _, a := range args {
		if !slices.Contains(t.ExcludeTools, a) {
			t.ExcludeTools = append(t.ExcludeTools, a)
		}
	}
	return nil
}

// unmarshalTenantSettings reads
//
//	tenant_settings <label> {
//	    min_artifact_chars <n>
//	    holdout            <percent>
//	    mode               enforce|shadow|off
//	}
func (t *Handler) unmarshalTenantSettings(outer *caddyfile.Dispenser) error {
	d := outer.NewFromNextSegment()
	d.Next() // consume "tenant_settings"
	if !d.NextArg() {
		return d.Errf("tenant_settings needs a tenant label, e.g. 'tenant_settings team-a { holdout 5%% }'")
	}
	label := d.Val()
	if d.NextArg() {
		return d.Errf("tenant_settings takes one label, got extra '%s'", d.Val())
	}
	if _, dup := t.LabelSettings[label]; dup {
		return d.Errf("duplicate tenant_settings '%s'", label)
	}
	var s LabelSettings
	seen := map[string]bool{}
	setters := map[string]func(string) error{
		"min_artifact_chars": func(v string) error { return setInt(&s.MinArtifactChars, v, 1) },
		"holdout": func(v string) error {
			if _, err := holdout.ParseShare(v); err != nil {
				return err
			}
			s.Holdout = v
			return nil
		},
		"mode": func(v string) error {
			switch v {
			case "enforce", "shadow", "off":
				s.Mode = v
				return nil
			}
			return fmt.Errorf("want enforce, shadow or off, got '%s'", v)
		},
	}
	for d.NextBlock(0) {
		name := d.Val()
		set, ok := setters[name]
		if !ok {
			return d.Errf("unrecognized tenant_settings subdirective '%s'", name)
		}
		if err := oneArg(d, name, seen, set); err != nil {
			return err
		}
	}
	if t.LabelSettings == nil {
		t.LabelSettings = map[string]LabelSettings{}
	}
	t.LabelSettings[label] = s
	return nil
}

// holdoutRecord sets the ledger record's holdout fields.
func holdoutRecord(r *vault.LedgerRecord, ob *observation) {
	hn := &ob.hold
	r.Arm = hn.arm()
	if r.Arm == "" {
		return
	}
	r.Retry = hn.retry
	r.ShadowSkipped = hn.shadowSkipped
	r.ShadowSentBytes, r.ShadowCostSent = hn.shadowSentBytes, hn.shadowCostSent
}
