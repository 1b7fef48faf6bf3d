package compiler

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/splice"
)

// Reason is why a candidate went upstream as the original bytes. Every
// reason is a fixed word, safe to log and to use as a metric label: none
// carries request content.
type Reason string

// Pass-through reasons reported in Result.Reason. The gateway's own reasons
// (the body was never compiled, or the client left) are declared in
// package gateway with this type.
const (
	ReasonOff           Reason = "off"
	ReasonNotCandidate  Reason = "not_candidate"
	ReasonInvalidJSON   Reason = "invalid_json"
	ReasonTooDeep       Reason = "too_deep"
	ReasonTooComplex    Reason = "too_complex"
	ReasonUnknownShape  Reason = "unknown_shape"
	ReasonNoSlots       Reason = "no_candidates"
	ReasonNothingToDo   Reason = "nothing_to_replace"
	ReasonVaultFull     Reason = "vault_full"
	ReasonVaultError    Reason = "vault_error"
	ReasonInvalidOutput Reason = "invalid_output"

	// ReasonProviderContextManagement: the request carries Anthropic's
	// context_management with an edit not known to compose with the
	// rewrite (or a malformed one); the provider edits that context itself.
	ReasonProviderContextManagement Reason = "provider_context_management"

	ReasonNotSmaller Reason = "not_smaller"
	ReasonMoreTokens Reason = "not_fewer_tokens"
	// ReasonNotCheaper: the rewrite is smaller but its expected billed cost
	// (prompt-cache reads and writes over the horizon) exceeds the
	// original's, e.g. it would rewrite a warm cached prefix.
	ReasonNotCheaper Reason = "not_cheaper"
	ReasonTimeout    Reason = "timeout"
	ReasonPanic      Reason = "panic"
	ReasonInternal   Reason = "internal_error"

	// ReasonHoldout: the conversation is in the holdout's control arm,
	// so its requests go out as the client sent them.
	ReasonHoldout Reason = "holdout"
)

// Defaults of Options, applied by New to zero values. The gateway's
// configuration (caddymodule) takes its defaults from these, so there is one
// set.
const (
	DefaultMinArtifactChars = 8000
	DefaultMaxArtifactChars = 2000000
	DefaultTimeout          = 2 * time.Second
	DefaultInlineLeases     = 1
)

const (
	maxDepthForRequests = 256
	recordTimeout       = time.Second
)

// Compiler compiles candidate requests. It is safe for concurrent use.
type Compiler struct {
	opts   Options
	store  artifact.Store
	tokens TokenCounter
	texts  *textCache
	counts *rawCounts // token counts of original bodies (rawcount.go)
	// invalid counts rewrites the validity check refused (invalid_output).
	invalid atomic.Uint64
	// usage holds what providers reported about recent responses.
	usage *usageNotes
	// precounting: a background count of a body runs (precount.go).
	precounting precounting
	// prestoring: a background write of a body's results runs (prestore.go).
	prestoring prestoring
}

// InvalidOutputs returns how many rewrites failed the validity check and
// went upstream as the original (passthrough=invalid_output).
func (c *Compiler) InvalidOutputs() uint64 { return c.invalid.Load() }

// New returns a Compiler. tokens may be nil (byte gate only).
func New(opts Options, store artifact.Store, tokens TokenCounter) (*Compiler, error) {
	if store == nil {
		return nil, errors.New("compiler: a Store is required")
	}
	if opts.MinArtifactChars <= 0 {
		opts.MinArtifactChars = DefaultMinArtifactChars
	}
	if opts.MaxArtifactChars <= 0 {
		opts.MaxArtifactChars = DefaultMaxArtifactChars
	}
	if opts.MaxArtifactChars < opts.MinArtifactChars {
		return nil, fmt.Errorf("compiler: max_artifact_chars %d is below min_artifact_chars %d", opts.MaxArtifactChars, opts.MinArtifactChars)
	}
	if opts.InlineLeases < 0 {
		opts.InlineLeases = DefaultInlineLeases
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if err := opts.Cost.Validate(); err != nil {
		return nil, fmt.Errorf("compiler: %w", err)
	}
	if err := CheckWorkingStateChars(opts.WorkingStateChars); err != nil {
		return nil, fmt.Errorf("compiler: %w", err)
	}
	if err := CheckReinlineRecovered(opts.ReinlineRecovered); err != nil {
		return nil, fmt.Errorf("compiler: %w", err)
	}
	if opts.ReinlineRecovered == "" {
		opts.ReinlineRecovered = ReinlineOn
	}
	return &Compiler{opts: opts, store: store, tokens: tokens, texts: newTextCache(), counts: newRawCounts(), usage: newUsageNotes()}, nil
}

// Compile compiles one request. It never fails: every problem yields a
// pass-through Result whose Body is req.Body itself. It returns by the
// timeout whatever the compile is doing: an abandoned compile finishes in
// the background and records nothing. With req.DeferCommit the lineage
// record is not written but returned as res.Commit, for the caller to run
// once the provider has accepted the request.
func (c *Compiler) Compile(ctx context.Context, req Request) Result {
	start := time.Now()
	res := Result{Body: req.Body, Decision: Passthrough, RawBytes: len(req.Body), SentBytes: len(req.Body)}
	f := formatFor("POST", req.Path)
	switch {
	case req.Mode == ModeOff, f == nil:
		res.Reason = ReasonOff
		if f == nil && req.Mode != ModeOff {
			res.Reason = ReasonNotCandidate
		}
		if req.Done != nil {
			req.Done()
		}
	default:
		res.Format = f.name()
		ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
		type outcome struct {
			res    Result
			commit func() time.Duration
		}
		done := make(chan outcome, 1)
		trees, lent := req.Scratch.take()
		go func(base Result) {
			o := outcome{res: base}
			defer func() {
				if r := recover(); r != nil {
					// The reason is reported; the panic value is not, since
					// it may quote request content.
					o = outcome{res: base}
					o.res.Reason = ReasonPanic
				}
				lent()
				if req.Done != nil {
					req.Done() // before the outcome: a compile that finishes in time has stopped when Compile returns
				}
				done <- o
			}()
			o.commit = c.compile(ctx, f, req, trees, &o.res)
		}(res)
		select {
		case o := <-done:
			res = o.res
			switch {
			case o.commit == nil:
			case req.DeferCommit:
				commit := o.commit
				res.Commit = func() { commit() }
			default:
				res.Vault += o.commit()
			}
		case <-ctx.Done():
			res.Reason = ReasonTimeout
		}
	}
	res.Total = time.Since(start)
	return res
}

// plan is the set of decisions for one request.
type plan struct {
	d        *doc
	chain    []artifact.Digest
	lineage  artifact.Lineage
	replace  []bool // per slot: a duplicate or leased artifact
	eligible []bool // per slot: large enough to be an artifact

	// A continuation's chain extends Request.Continues (continuation.go):
	// chainBase units precede p.chain, and the record keeps the continued
	// node's cache state (contCache).
	chainBase int
	continued bool
	contCache []byte
	// unitChain, for a continuation, chains every unit of the body
	// (previous_response_id and instructions included) for the rendering
	// the cost model prices (unitIDs); p.chain covers only its items.
	unitChain []artifact.Digest

	held       map[artifact.Digest]bool // Request.HeldInline of a continuation (continuation_lease.go)
	hist       *history                 // the described conversation, nil if none
	compaction *compaction              // nil when compaction does not apply

	// The cost decision (nil with Cost.Off) and this plan's variant.
	choice       *choice
	variant      variant
	prev         *cacheState   // the conversation's recorded cache state, nil if none
	head         uint64        // fingerprint of what renders before the units
	headSize     int           // its bytes
	foldMemo     map[int]fold  // folded turns by first element, shared by the variants
	receiptTexts []string      // per slot: its receipt once made (receiptOf), shared by the variants
	sameAs       []int         // per slot: the earlier copy a receipt names, -1 for none
	receiptDelta []int         // per slot: bytes its receipt adds to the body (negative: saves), without a receipt breakpoint
	blocks       receiptBlocks // receipts as block lists, and where one may carry a breakpoint

	// Built from the decisions by build:
	edits    []edit
	arts     []artifact.Artifact // unique artifacts named by receipts and summaries
	texts    []*text             // per art: its text, decoded only if it must be stored
	receipt  []bool              // per slot: goes out as a receipt
	gone     []bool              // per slot: folded away with its turn
	receipts int
	markUnit int          // the unit whose receipt carries the receipt breakpoint, -1 for none
	kinds    ReceiptKinds // receipts by why they were made

	reinlineMode string                   // Options.ReinlineRecovered
	recovery     Recovery                 // Options.Recovery for this request (forDoc): the hint and the tool
	tool         toolPlan                 // the recovery tool (recovery_tool.go)
	recovered    map[artifact.Digest]bool // artifacts the model recovered (Result.Recovered)
}

// reinline reports whether the plan must carry artifact d inline whatever
// else would receipt it (ReinlineOn): the model recovered it while
// answering the previous forwarded request.
func (p *plan) reinline(d artifact.Digest) bool {
	return p.reinlineMode == ReinlineOn && p.prev.wasRecovered(d)
}

func (p *plan) folds() []fold {
	if p.compaction == nil {
		return nil
	}
	return p.compaction.folds
}

// build turns the decisions into edits and the artifacts they name.
func (p *plan) build() {
	slots := p.d.slots
	p.receipt = make([]bool, len(slots))
	p.gone = make([]bool, len(slots))
	p.receiptDelta = make([]int, len(slots))
	// Most slots of a long history get a receipt.
	p.edits = make([]edit, 0, len(slots))
	p.arts = make([]artifact.Artifact, 0, len(slots))
	p.texts = make([]*text, 0, len(slots))
	named := make(map[artifact.Digest]bool, len(slots))
	add := func(a artifact.Artifact, t *text) {
		if !named[a.Digest] {
			named[a.Digest] = true
			p.arts = append(p.arts, a)
			p.texts = append(p.texts, t)
		}
	}
	copies := make(map[artifact.Digest]int, len(slots)) // per digest: its eligible copies in this request
	for i, s := range slots {
		if p.eligible[i] {
			copies[s.text.digest]++
		}
	}
	cp := p.compaction
	p.markUnit = -1
	mark := -1 // the edit of the last receipt that may carry the receipt breakpoint
	for i, s := range slots {
		if cp != nil && cp.inFolded[i] {
			p.gone[i] = true
			continue
		}
		if !p.replace[i] && (cp == nil || !cp.vaulted[i]) {
			continue
		}
		p.receipt[i] = true
		p.receipts++
		switch {
		case !p.replace[i]:
			p.kinds.Compaction++
		case p.sameAs[i] >= 0 || copies[s.text.digest] > 1:
			p.kinds.Duplicate++
		default:
			p.kinds.Lease++
		}
		e, markable := p.receiptEdit(i)
		if markable {
			mark, p.markUnit = len(p.edits), s.unit
		}
		p.receiptDelta[i] = len(e.repl) - (e.end - e.start)
		p.edits = append(p.edits, e)
		add(artifact.Artifact{Digest: s.text.digest, Raw: p.d.src[s.start:s.end], Tool: s.tool, Args: s.args, Chars: s.text.chars}, s.text)
	}
	if mark >= 0 {
		e := &p.edits[mark]
		e.repl = append(e.repl[:len(e.repl)-len(receiptBlockClose)], receiptMarker+receiptBlockClose...)
	}
	for _, f := range p.folds() {
		p.edits = append(p.edits, f.edits...)
		add(f.art, &text{s: f.art.Text})
	}
}

// receiptEdit is the edit that puts slot i's receipt in place of its
// value; markable: the receipt may carry the receipt breakpoint.
func (p *plan) receiptEdit(i int) (e edit, markable bool) {
	s := &p.d.slots[i]
	var r string
	if k := p.sameAs[i]; k >= 0 {
		r = p.recovery.receiptHint(receiptSameAs(artifact.Receipt(s.text.digest, s.tool, s.text.chars), p.d.callID(p.d.slots[k])))
	} else {
		r = p.receiptOf(i)
	}
	repl := jsonv.AppendString(make([]byte, 0, len(r)+16), r)
	start, end := s.start, s.end
	switch {
	case p.blocks.on:
		if s.inner {
			// The whole string goes into the block, the client's
			// wrapper parts around the receipt with it, byte for byte.
			src := p.d.src
			q := make([]byte, 0, len(repl)+(s.start-s.value.Start)+(s.value.End-s.end))
			q = append(append(append(q, src[s.value.Start:s.start]...), repl[1:len(repl)-1]...), src[s.end:s.value.End]...)
			repl, start, end = q, s.value.Start, s.value.End
		}
		repl = blockReceipt(repl, false)
		markable = p.blocks.markable(*s)
	case s.inner:
		repl = repl[1 : len(repl)-1] // spliced inside the string, between its wrapper parts
	}
	return edit{start: start, end: end, at: s.value.Start, repl: repl}, markable
}

// receiptOf returns slot i's receipt, with the recovery hint, as the
// plan's variants share it (receiptTexts): every variant receipts mostly
// the same slots.
func (p *plan) receiptOf(i int) string {
	if r := p.receiptTexts[i]; r != "" {
		return r
	}
	s := p.d.slots[i]
	r := p.recovery.receiptHint(artifact.Receipt(s.text.digest, s.tool, s.text.chars))
	p.receiptTexts[i] = r
	return r
}

// compile fills res and returns the lineage record to commit if res is
// used (nil when there is nothing to record).
func (c *Compiler) compile(ctx context.Context, f format, req Request, trees *jsonv.Arena, res *Result) (commit func() time.Duration) {
	t0 := time.Now()
	d, reason := parseDocIn(trees, f, req.Body, c.texts, newKnownStrings(c.texts, req.Scope.Tenant))
	res.Parse = time.Since(t0)
	if reason != "" {
		res.Reason = reason
		return nil
	}
	if ctx.Err() != nil {
		// Abandoned at the timeout: stop here rather than plan a result
		// nobody reads (it holds its caller's compile slot until it stops).
		res.Reason = ReasonTimeout
		return nil
	}
	if d.model == "" {
		d.model = pathModel(req.Path) // Gemini names the model in the path
	}
	res.Model = d.model
	d.hold = req.Hold
	keyIDs(d.doc, req.KeyID)
	p := &plan{d: d.doc, recovery: c.opts.Recovery.forDoc(d.doc)}
	c.markEligible(p, req, res)
	if len(d.units) == 0 {
		res.Reason = ReasonNoSlots
		return nil
	}
	res.Conversation = conversationKey(f.name(), d.doc, d.hasher)
	if req.Holdout != nil {
		if req.Mode = req.Holdout(res.Conversation); req.Mode == ModeOff {
			res.Reason = ReasonHoldout
			return nil
		}
	}
	if !c.lineage(ctx, f, d.hasher, p, req, res) {
		return nil
	}
	// The history serves leases (which results are unanswered) and
	// compaction; a request that needs neither is not described.
	if res.Slots > 0 || c.opts.Compaction.Enabled {
		p.hist = describeHistory(p.d)
	}
	p.held = heldInline(f, p.d, req)
	if ctx.Err() != nil {
		res.Reason = ReasonTimeout
		return nil
	}
	p, ch := c.choose(p, f.name(), req)
	forwarded := c.finish(ctx, f, p, ch, req, res)
	if c.opts.WorkAhead && res.Reason == ReasonNothingToDo && ctx.Err() == nil {
		c.precount(p.d, d.model, req)
		c.prestore(ctx, req, p)
	}
	return func() time.Duration { return c.record(ctx, req.Scope, p, forwarded) }
}

// markEligible marks the slots whose size lets them become receipts and
// counts them in res.Slots.
func (c *Compiler) markEligible(p *plan, req Request, res *Result) {
	minChars := c.minArtifactChars(req)
	if !c.opts.Cost.Off {
		minChars = min(minChars, c.opts.Cost.LeaseMin()) // the bill decides on the smaller ones (plan_choice.go)
	}
	for _, s := range p.d.slots {
		ok := s.text.chars >= minChars && s.text.chars <= c.opts.MaxArtifactChars && !c.excluded(s.tool)
		p.eligible = append(p.eligible, ok)
		if ok {
			res.Slots++
		}
	}
}

// lineage asks the store for the conversation's lineage when the plan
// needs it: leases need it, and without an eligible slot there is nothing
// to lease, so the vault is not asked (nor told) anything, unless
// compaction may fold: then the cost decision needs the conversation's
// cache state. It returns false, with the reason set, when the store
// fails: no lineage known, recording would guess, so nothing is recorded.
func (c *Compiler) lineage(ctx context.Context, f format, h *hasher, p *plan, req Request, res *Result) bool {
	cont := continuation(f, p.d, req)
	if res.Slots > 0 || (!c.opts.Cost.Off && c.opts.Compaction.Enabled) || cont || req.Chained {
		tv := time.Now()
		ok, err := false, error(nil)
		if cont {
			if ok, err = c.continuedLineage(ctx, h, p, req); ok {
				p.unitChain = h.chain(f.name(), p.d.units)
			}
		}
		if err == nil && !ok {
			p.chain = h.chain(f.name(), p.d.units)
			p.lineage, err = c.store.Ancestor(ctx, req.Scope, p.chain)
		}
		res.Vault += time.Since(tv)
		if err != nil {
			p.chain = nil
			res.Reason, res.Detail = vaultReason(ctx, err), err.Error()
			return false
		}
		res.Chain = Chain{End: p.chain[len(p.chain)-1], Length: p.chainBase + len(p.chain)}
	}
	return true
}

// finish rewrites by the chosen plan (or says why not), fills res with
// the outcome, and reports whether the rewrite is forwarded.
func (c *Compiler) finish(ctx context.Context, f format, p *plan, ch *choice, req Request, res *Result) (forwarded bool) {
	out := req.Body
	if len(p.edits) == 0 {
		switch {
		case ch != nil && ch.declined:
			res.Reason = ReasonNotCheaper // a rewrite existed; the bill prefers the original
		case res.Slots == 0:
			res.Reason = ReasonNoSlots
		default:
			res.Reason = ReasonNothingToDo
		}
	} else {
		out, res.Reason = c.rewrite(ctx, f, p, req, res)
		forwarded = res.Reason == "" && req.Mode != ModeShadow
	}
	switch {
	case req.Mode == ModeShadow && res.Reason == "":
		// Shadow reports what enforce would have sent; the caller forwards
		// the original.
		res.Decision, res.SentBytes = Shadow, len(out)
		res.Receipts, res.Folded, res.Kinds = p.receipts, len(p.folds()), p.kinds
	case forwarded:
		res.Decision, res.Body, res.SentBytes = Accepted, out, len(out)
		res.Receipts, res.Folded, res.Kinds = p.receipts, len(p.folds()), p.kinds
	}
	if ch != nil {
		ch.costs(res, res.Reason == "")
	}
	if len(p.chain) > 0 {
		res.usageKey = usageKey(req.Scope, p.chain[len(p.chain)-1])
	}
	res.RecoveryTool = forwarded && p.tool.def != nil
	if res.RecoveryTool {
		res.Reachable = reachable(p)
	}
	res.ToolConflict = p.tool.conflict
	if req.Chained {
		res.Inline = inlineDigests(p, forwarded)
	}
	res.Recovered = func(ds ...artifact.Digest) {
		if p.recovered == nil {
			p.recovered = map[artifact.Digest]bool{}
		}
		for _, d := range ds {
			p.recovered[d] = true
		}
	}
	return forwarded
}

// parsed bundles a doc with the hasher that memoised its long strings.
type parsed struct {
	*doc
	hasher *hasher
}

func parseDoc(f format, src []byte, cache *textCache) (parsed, Reason) {
	return parseDocKnown(f, src, cache, nil)
}

// parseDocKnown is parseDoc that skips the scan of the long strings known
// has seen validated before (known may be nil; see knownStrings).
func parseDocKnown(f format, src []byte, cache *textCache, known *knownStrings) (parsed, Reason) {
	return parseDocIn(nil, f, src, cache, known)
}

// parseDocIn is parseDocKnown with the tree in arena (nil: the heap); the
// check's parse of the rewrite goes there too (doc.arena).
func parseDocIn(arena *jsonv.Arena, f format, src []byte, cache *textCache, known *knownStrings) (parsed, Reason) {
	if len(src) == 0 {
		return parsed{}, ReasonInvalidJSON
	}
	var jk jsonv.Known
	if known != nil {
		jk = known
	}
	root, err := jsonv.ParseIn(arena, src, maxDepthForRequests, jk)
	if err != nil {
		if errors.Is(err, jsonv.ErrDepth) {
			return parsed{}, ReasonTooDeep
		}
		if errors.Is(err, jsonv.ErrTooManyNodes) {
			return parsed{}, ReasonTooComplex
		}
		return parsed{}, ReasonInvalidJSON
	}
	d := &doc{src: src, root: root, known: known, arena: arena}
	h := newHasher(src, cache)
	h.known = known
	if reason := f.parse(d, h); reason != "" {
		return parsed{}, reason
	}
	return parsed{d, h}, ""
}

// decide marks which slots become receipts. Within the request every copy of
// an artifact but the newest is a receipt; an artifact that has already gone
// inline in InlineLeases forwarded requests of this conversation is a
// receipt everywhere, except where the model has not answered it yet: a
// result it just asked for again (a re-read file, a re-run test) goes
// inline, or it would never see that content again.
//
// With a recorded cache state two rules keep the cached prefix: the stable
// variant replays the previous request's decision for every slot it
// carried, and duplicates keep the copy the previous request sent inline
// (plan_dup.go), unless a lease receipts that copy anyway.
func (c *Compiler) decide(p *plan) {
	slots := p.d.slots
	p.replace = make([]bool, len(slots))
	p.sameAs = make([]int, len(slots))
	newest := make(map[artifact.Digest]int, len(slots))
	kept := make(map[artifact.Digest]int, len(slots))
	for i, s := range slots {
		p.sameAs[i] = -1
		if p.eligible[i] {
			newest[s.text.digest] = i
			if _, ok := kept[s.text.digest]; !ok && p.keepsCached(i) {
				kept[s.text.digest] = i
			}
		}
	}
	leased := func(i int) bool {
		return c.opts.InlineLeases > 0 && p.lineage.Exposures[slots[i].text.digest] >= c.opts.InlineLeases && p.mayLease(i)
	}
	for i, s := range slots {
		if !p.eligible[i] {
			continue
		}
		dg := s.text.digest
		if p.variant.replay && p.old(i) && !p.reinline(dg) {
			// An old unit of a continuation may still be unanswered: it
			// is replayed as a receipt only where the model holds a copy.
			p.replace[i] = p.prev.wasReceipted(dg) && p.mayLease(i)
			continue
		}
		if k, ok := kept[dg]; ok && (p.variant.replay || !leased(k)) {
			if i != k && !p.hist.unanswered(s) {
				p.replace[i], p.sameAs[i] = true, k
			}
			continue
		}
		p.replace[i] = leased(i) || newest[dg] != i
	}
}

// rewrite persists the artifacts, splices the receipts in and runs the
// validity check and the final gate. It returns the rewritten body, or a
// pass-through reason.
func (c *Compiler) rewrite(ctx context.Context, f format, p *plan, req Request, res *Result) ([]byte, Reason) {
	// Room for the recovery tool's insertion (toolInsert: a comma or a
	// new "tools" member around the definition), so adding it copies no
	// second rewrite.
	reserve := 0
	if p.tool.def != nil {
		reserve = len(p.tool.def) + len(`,"tools":[]`)
	}
	out, err := splice.Reserve(req.Body, p.edits, reserve)
	if err != nil {
		return nil, ReasonInternal
	}
	root, err := verified(f, p, out, c.texts)
	if err != nil {
		c.invalid.Add(1)
		return nil, ReasonInvalidOutput
	}
	// The recovery tool (planned with the plan, priced by its cost) is an
	// edit like the receipts: its bytes and tokens count in the gate.
	if p.tool.def != nil {
		if out, err = addTool(out, root, p.tool.def); err != nil {
			c.invalid.Add(1)
			return nil, ReasonInvalidOutput
		}
	}
	// The gate and the write of the artifacts run at once; receipts go out
	// only once their content is durable (persist_overlap.go).
	return c.gateAndPersist(ctx, f, p, req, out, res)
}

// persist makes every artifact the rewrite names durable. Artifacts the
// store confirms it has are not sent again; only the missing ones are
// decoded and written (one synced batch, read back).
func (c *Compiler) persist(ctx context.Context, scope artifact.Scope, p *plan) error {
	digests := make([]artifact.Digest, len(p.arts))
	for i, a := range p.arts {
		digests[i] = a.Digest
	}
	want, err := c.missing(ctx, scope, digests)
	if err != nil || len(want) == 0 {
		return err
	}
	var todo []*text
	seen := make(map[*text]bool, len(want))
	for i, a := range p.arts {
		if t := p.texts[i]; want[a.Digest] && !seen[t] {
			seen[t] = true
			todo = append(todo, t)
		}
	}
	decodeAll(todo)
	arts := make([]artifact.Artifact, 0, len(want))
	for i, a := range p.arts {
		if want[a.Digest] {
			a.Text = p.texts[i].str()
			arts = append(arts, a)
		}
	}
	return c.store.Persist(ctx, scope, arts)
}

// missing is the set of digests the store does not hold for scope: the
// ones to decode and write.
func (c *Compiler) missing(ctx context.Context, scope artifact.Scope, digests []artifact.Digest) (map[artifact.Digest]bool, error) {
	missing, err := c.store.Missing(ctx, scope, digests)
	if err != nil || len(missing) == 0 {
		return nil, err
	}
	want := make(map[artifact.Digest]bool, len(missing))
	for _, d := range missing {
		want[d] = true
	}
	return want, nil
}

// decodeAll decodes the texts about to be stored (text.str), on every core
// when there is much of it: a cold request stores a megabyte of new tool
// results, and decoding their escapes is one of the costs it waits for.
// Each text must appear once.
func decodeAll(texts []*text) {
	total := 0
	for _, t := range texts {
		total += t.chars
	}
	workers := min(runtime.GOMAXPROCS(0), len(texts))
	if total < parallelDecodeChars || workers < 2 {
		for _, t := range texts {
			t.str()
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(texts); i = int(next.Add(1) - 1) {
				texts[i].str()
			}
		})
	}
	wg.Wait()
}

// parallelDecodeChars is the size from which decodeAll uses every core: a
// goroutine costs more than decoding less.
const parallelDecodeChars = 256 << 10

// gate is the strict final gate: the rewrite goes out only if it is strictly
// smaller in bytes, strictly fewer tokens when a tokenizer applies, and,
// with a cost model (ch non-nil), not more expensive in expected billed
// cost than the original.
func (c *Compiler) gate(ctx context.Context, p *plan, raw, out []byte, res *Result) Reason {
	if len(out) >= len(raw) {
		return ReasonNotSmaller
	}
	if reason := c.tokenGate(ctx, p, raw, out, res); reason != "" {
		return reason
	}
	if ch := p.choice; ch != nil && !ch.cheaper(res, len(raw), len(out)) {
		return ReasonNotCheaper
	}
	return ""
}

// tokenGate counts both bodies when a tokenizer applies and vetoes a
// rewrite that is not strictly fewer tokens.
func (c *Compiler) tokenGate(ctx context.Context, p *plan, raw, out []byte, res *Result) Reason {
	if c.tokens == nil {
		return ""
	}
	model := p.d.model
	rawHints, outHints := tokenHints(p.d, p.edits)
	// Both bodies are counted at once, so the gate waits for at most one
	// token budget (the counter never waits longer than its budget).
	var st artifact.TokenCount
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Compile's recover does not reach this goroutine; a failed count
		// leaves st empty, which skips the token veto.
		defer func() { _ = recover() }()
		// out is the compile's own: nothing changes it once it is
		// counted (the recovery tool went in before).
		st = countHinted(ctx, c.tokens, model, out, outHints, immutableHold)
	}()
	rt := c.countRaw(ctx, p.d, model, raw, rawHints)
	<-done
	res.Tokens = TokenReport{Status: rt.Status, Encoding: rt.Encoding, Raw: rt.N, Sent: rt.N}
	if !rt.Status.Measured() {
		return ""
	}
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

// countRaw counts the original body raw, from rawCounts when these bytes
// were counted before. The key comes from the parse of d, so only that
// very body is looked up.
func (c *Compiler) countRaw(ctx context.Context, d *doc, model string, raw []byte, hints []int) artifact.TokenCount {
	var key textKey
	ok := false
	var hold artifact.Hold
	if len(raw) == len(d.src) && unsafe.SliceData(raw) == unsafe.SliceData(d.src) {
		hold = d.hold
		if c.counts != nil && d.known != nil {
			key, ok = d.known.bodyKey(raw, d.known.tenant+"\x00"+model)
		}
	}
	if ok {
		if v, hit := c.counts.get(key); hit {
			return v
		}
	}
	rt := countHinted(ctx, c.tokens, model, raw, hints, hold)
	if ok && rt.Status.Measured() {
		c.counts.put(key, rt)
	}
	return rt
}

// record stores the forwarded request's lineage node: each artifact it
// carried inline counts as one more exposure. It runs for pass-through too,
// so leases always follow what actually went upstream, and never names a
// receipt that was not sent.
func (c *Compiler) record(ctx context.Context, scope artifact.Scope, p *plan, forwarded bool) time.Duration {
	if len(p.chain) == 0 {
		return 0 // no eligible slot, so no lineage was looked up: nothing to lease
	}
	exp := make(map[artifact.Digest]int, len(p.lineage.Exposures)+len(p.d.slots))
	for k, v := range p.lineage.Exposures {
		exp[k] = v
	}
	inline := map[artifact.Digest]bool{}
	for i, s := range p.d.slots {
		if !p.eligible[i] || (forwarded && (p.receipt[i] || p.gone[i])) {
			continue
		}
		if dg := s.text.digest; !inline[dg] {
			inline[dg] = true
			exp[dg]++
		}
	}
	if c.opts.ReinlineRecovered != ReinlineOff {
		for dg := range p.recovered {
			// Needed again: inline for the next InlineLeases requests. The
			// count goes to 0, not away, so the conversation may still recover it.
			exp[dg] = 0
		}
	}
	var refs []artifact.Digest
	if forwarded {
		for _, a := range p.arts {
			refs = append(refs, a.Digest)
			if _, ok := exp[a.Digest]; !ok {
				exp[a.Digest] = 0 // named, never inline: recoverable by this conversation
			}
		}
	}
	rec := artifact.Record{
		ChainEnd: p.chain[len(p.chain)-1], Length: p.chainBase + len(p.chain),
		Parent: p.lineage.Ancestor, HasParent: p.lineage.Found,
		Exposures: exp, Referenced: refs,
	}
	switch {
	case p.continued:
		// The cache state of the last whole body goes on: a fragment's
		// rendering is not the history the provider holds (continuation.go).
		rec.Cache = p.contCache
	case p.choice != nil:
		rec.Cache = p.choice.state(p, forwarded)
	}
	// The request goes out whatever happens here; a lost record only means
	// a later request finds an older ancestor and inlines more.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	tv := time.Now()
	_ = c.store.Record(rctx, scope, rec)
	return time.Since(tv)
}

// reachable is Result.Reachable of a forwarded plan: the artifacts its
// receipts and folds name, newest first, then the rest of its lineage's
// (named or carried inline by an earlier request) in digest order.
func reachable(p *plan) []artifact.Digest {
	out := make([]artifact.Digest, 0, len(p.arts)+len(p.lineage.Exposures))
	seen := make(map[artifact.Digest]bool, cap(out))
	for i := len(p.arts) - 1; i >= 0; i-- {
		if d := p.arts[i].Digest; !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	rest := make([]artifact.Digest, 0, len(p.lineage.Exposures))
	for d := range p.lineage.Exposures {
		if !seen[d] {
			rest = append(rest, d)
		}
	}
	slices.SortFunc(rest, func(a, b artifact.Digest) int { return bytes.Compare(a[:], b[:]) })
	return append(out, rest...)
}

func vaultReason(ctx context.Context, err error) Reason {
	switch {
	case ctx.Err() != nil:
		return ReasonTimeout
	case errors.Is(err, artifact.ErrFull):
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

// newText makes the text of a decoded or validated string (valid UTF-8)
// whose receipt would replace raw.
func newText(s string, raw []byte) *text {
	b := unsafe.Slice(unsafe.StringData(s), len(s)) // read only
	t := &text{s: s, canon: sha256.Sum256(b), chars: runeCount(b)}
	t.digest = artifact.DigestOfSums(t.canon, sha256.Sum256(raw))
	return t
}
