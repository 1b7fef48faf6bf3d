package compiler

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"runtime/debug"
	"time"
	"unicode/utf8"

	"github.com/tokenterminator/caddy-token-terminator/compiler/jsonv"
)

// Pass-through reasons reported in Result.Reason.
const (
	ReasonOff           = "off"
	ReasonNotCandidate  = "not_candidate"
	ReasonInvalidJSON   = "invalid_json"
	ReasonTooDeep       = "too_deep"
	ReasonUnknownShape  = "unknown_shape"
	ReasonNoSlots       = "no_candidates"
	ReasonNothingToDo   = "nothing_to_replace"
	ReasonVaultFull     = "vault_full"
	ReasonVaultError    = "vault_error"
	ReasonInvalidOutput = "invalid_output"
	ReasonNotSmaller    = "not_smaller"
	ReasonMoreTokens    = "not_fewer_tokens"
	ReasonTimeout       = "timeout"
	ReasonPanic         = "panic"
	ReasonInternal      = "internal_error"
	ReasonShadow        = ""
	defaultMinChars     = 8000
	defaultMaxChars     = 2000000
	defaultTimeout      = 2 * time.Second
	defaultInlineLeases = 1
	maxDepthForRequests = 256
	recordTimeout       = time.Second
)

// ErrFull may be wrapped by a Store whose capacity is exhausted; the compiler
// reports it as vault_full rather than vault_error.
var ErrFull = errors.New("vault full")

// Compiler compiles candidate requests. It is safe for concurrent use.
type Compiler struct {
	opts   Options
	store  Store
	tokens TokenCounter
}

// New returns a Compiler. tokens may be nil (byte gate only).
func New(opts Options, store Store, tokens TokenCounter) (*Compiler, error) {
	if store == nil {
		return nil, errors.New("compiler: a Store is required")
	}
	if opts.MinArtifactChars <= 0 {
		opts.MinArtifactChars = defaultMinChars
	}
	if opts.MaxArtifactChars <= 0 {
		opts.MaxArtifactChars = defaultMaxChars
	}
	if opts.MaxArtifactChars < opts.MinArtifactChars {
		return nil, fmt.Errorf("compiler: max_artifact_chars %d is below min_artifact_chars %d", opts.MaxArtifactChars, opts.MinArtifactChars)
	}
	if opts.InlineLeases < 0 {
		opts.InlineLeases = defaultInlineLeases
	}
	if opts.Timeout <= 0 {
		opts.Timeout = defaultTimeout
	}
	return &Compiler{opts: opts, store: store, tokens: tokens}, nil
}

// Compile compiles one request. It never fails: every problem yields a
// pass-through Result whose Body is req.Body itself.
func (c *Compiler) Compile(ctx context.Context, req Request) (res Result) {
	start := time.Now()
	res = Result{Body: req.Body, Decision: Passthrough, RawBytes: len(req.Body), SentBytes: len(req.Body)}
	defer func() {
		if r := recover(); r != nil {
			res = Result{Body: req.Body, Decision: Passthrough, Reason: ReasonPanic, Format: res.Format,
				RawBytes: len(req.Body), SentBytes: len(req.Body)}
			_ = debug.Stack // the caller logs the reason; content never leaves here
		}
		res.Total = time.Since(start)
	}()
	if req.Mode == ModeOff {
		res.Reason = ReasonOff
		return res
	}
	f := formatFor("POST", req.Path)
	if f == nil {
		res.Reason = ReasonNotCandidate
		return res
	}
	res.Format = f.name()
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	c.compile(ctx, f, req, &res)
	return res
}

// plan is the set of decisions for one request.
type plan struct {
	d        *doc
	chain    []Digest
	lineage  Lineage
	replace  []bool     // per slot: goes out as a receipt
	eligible []bool     // per slot: large enough to be an artifact
	arts     []Artifact // unique artifacts named by receipts
}

func (c *Compiler) compile(ctx context.Context, f format, req Request, res *Result) {
	t0 := time.Now()
	d, reason := parseDoc(f, req.Body)
	res.Parse = time.Since(t0)
	if reason != "" {
		res.Reason = reason
		return
	}
	h := d.hasher
	p := &plan{d: d.doc, chain: h.chain(f.name(), d.units)}
	for _, s := range d.slots {
		ok := s.text.chars >= c.opts.MinArtifactChars && s.text.chars <= c.opts.MaxArtifactChars
		p.eligible = append(p.eligible, ok)
		if ok {
			res.Slots++
		}
	}
	if len(p.chain) == 0 {
		res.Reason = ReasonNoSlots
		return
	}
	tv := time.Now()
	lin, err := c.store.Ancestor(ctx, req.Scope, p.chain)
	res.Vault += time.Since(tv)
	if err != nil {
		res.Reason = vaultReason(ctx, err)
		return // no lineage known: recording would guess, so record nothing
	}
	p.lineage = lin
	c.decide(p)

	out := req.Body
	sent := make([]bool, len(d.slots)) // per slot: went out as a receipt
	if len(p.arts) == 0 {
		if res.Slots == 0 {
			res.Reason = ReasonNoSlots
		} else {
			res.Reason = ReasonNothingToDo
		}
	} else {
		out, res.Reason = c.rewrite(ctx, f, p, req, res)
		if res.Reason == "" {
			copy(sent, p.replace)
		}
	}
	if req.Mode == ModeShadow {
		if res.Reason == "" {
			res.Decision, res.Receipts = Shadow, countTrue(p.replace)
			res.SentBytes = len(req.Body)
		}
		out, sent = req.Body, make([]bool, len(d.slots))
	} else if res.Reason == "" {
		res.Decision, res.Body, res.SentBytes, res.Receipts = Accepted, out, len(out), countTrue(sent)
	}
	c.record(ctx, req.Scope, p, sent, res)
}

// parsed bundles a doc with the hasher that memoised its long strings.
type parsed struct {
	*doc
	hasher *hasher
}

func parseDoc(f format, src []byte) (parsed, string) {
	if len(src) == 0 {
		return parsed{}, ReasonInvalidJSON
	}
	root, err := jsonv.Parse(src, maxDepthForRequests)
	if err != nil {
		if errors.Is(err, jsonv.ErrDepth) {
			return parsed{}, ReasonTooDeep
		}
		return parsed{}, ReasonInvalidJSON
	}
	d := &doc{src: src, root: root}
	h := newHasher(src)
	if reason := f.parse(d, h); reason != "" {
		return parsed{}, reason
	}
	return parsed{d, h}, ""
}

// decide marks which slots become receipts. Within the request every copy of
// an artifact but the newest is a receipt; an artifact that has already gone
// inline in InlineLeases forwarded requests of this conversation is a
// receipt everywhere.
func (c *Compiler) decide(p *plan) {
	slots := p.d.slots
	p.replace = make([]bool, len(slots))
	newest := map[Digest]int{}
	for i, s := range slots {
		if p.eligible[i] {
			newest[s.text.digest] = i
		}
	}
	named := map[Digest]bool{}
	for i, s := range slots {
		if !p.eligible[i] {
			continue
		}
		dg := s.text.digest
		leased := c.opts.InlineLeases > 0 && p.lineage.Exposures[dg] >= c.opts.InlineLeases
		if !leased && newest[dg] == i {
			continue
		}
		p.replace[i] = true
		if !named[dg] {
			named[dg] = true
			p.arts = append(p.arts, Artifact{
				Digest: dg, Text: s.text.s, Raw: s.value.Raw(p.d.src),
				Tool: s.tool, Args: s.args, Chars: s.text.chars,
			})
		}
	}
}

// rewrite persists the artifacts, splices the receipts in and runs the
// validity check and the final gate. It returns the rewritten body, or a
// pass-through reason.
func (c *Compiler) rewrite(ctx context.Context, f format, p *plan, req Request, res *Result) ([]byte, string) {
	edits := make([]edit, 0, len(p.arts))
	for i, s := range p.d.slots {
		if p.replace[i] {
			r := Receipt(s.text.digest, s.tool, s.text.chars)
			edits = append(edits, edit{start: s.value.Start, end: s.value.End, repl: jsonv.AppendString(nil, r)})
		}
	}
	out, err := splice(req.Body, edits)
	if err != nil {
		return nil, ReasonInternal
	}
	if err := verify(f, p.d, out, edits); err != nil {
		return nil, ReasonInvalidOutput
	}
	if reason := c.gate(ctx, p.d.model, req.Body, out, res); reason != "" {
		return nil, reason
	}
	// Nothing is lost: receipts go out only once their content is durable.
	// Shadow mode forwards no receipt, so it stores nothing.
	if req.Mode != ModeShadow {
		tv := time.Now()
		err := c.store.Persist(ctx, req.Scope, p.arts)
		res.Vault += time.Since(tv)
		if err != nil {
			return nil, vaultReason(ctx, err)
		}
	}
	if ctx.Err() != nil {
		return nil, ReasonTimeout
	}
	return out, ""
}

// gate is the strict final gate: the rewrite goes out only if it is strictly
// smaller in bytes and, when a tokenizer applies, strictly fewer tokens.
func (c *Compiler) gate(ctx context.Context, model string, raw, out []byte, res *Result) string {
	if len(out) >= len(raw) {
		return ReasonNotSmaller
	}
	if c.tokens == nil {
		return ""
	}
	rt := c.tokens.Count(ctx, model, raw)
	res.Tokens = TokenReport{Status: rt.Status, Encoding: rt.Encoding, Raw: rt.N, Sent: rt.N}
	if rt.Status != "exact" && rt.Status != "estimate" {
		return ""
	}
	st := c.tokens.Count(ctx, model, out)
	if st.Status != rt.Status {
		res.Tokens = TokenReport{Status: st.Status, Encoding: st.Encoding}
		return ""
	}
	res.Tokens.Sent = st.N
	if st.N >= rt.N {
		return ReasonMoreTokens
	}
	return ""
}

// record stores the forwarded request's lineage node: the artifacts it
// carried inline count as one more exposure each. It runs for pass-through
// too, so leases always follow what actually went upstream.
func (c *Compiler) record(ctx context.Context, scope Scope, p *plan, sent []bool, res *Result) {
	if len(p.chain) == 0 {
		return
	}
	exp := make(map[Digest]int, len(p.lineage.Exposures)+len(p.d.slots))
	for k, v := range p.lineage.Exposures {
		exp[k] = v
	}
	inline := map[Digest]bool{}
	var refs []Digest
	seenRef := map[Digest]bool{}
	for i, s := range p.d.slots {
		if !p.eligible[i] {
			continue
		}
		dg := s.text.digest
		if sent[i] {
			if !seenRef[dg] {
				seenRef[dg] = true
				refs = append(refs, dg)
			}
			continue
		}
		if !inline[dg] {
			inline[dg] = true
			exp[dg]++
		}
	}
	rec := Record{
		ChainEnd: p.chain[len(p.chain)-1], Length: len(p.chain),
		Parent: p.lineage.Ancestor, HasParent: p.lineage.Found,
		Exposures: exp, Referenced: refs,
	}
	// The request goes out whatever happens here; a lost record only means
	// a later request finds an older ancestor and inlines more.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	tv := time.Now()
	_ = c.store.Record(rctx, scope, rec)
	res.Vault += time.Since(tv)
}

func vaultReason(ctx context.Context, err error) string {
	switch {
	case ctx.Err() != nil:
		return ReasonTimeout
	case errors.Is(err, ErrFull):
		return ReasonVaultFull
	}
	return ReasonVaultError
}

func countTrue(b []bool) int {
	n := 0
	for _, v := range b {
		if v {
			n++
		}
	}
	return n
}

func newText(s string) *text {
	return &text{s: s, digest: sha256.Sum256([]byte(s)), chars: utf8.RuneCountInString(s)}
}
