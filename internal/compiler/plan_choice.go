package compiler

import (
	"cmp"
	"slices"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/cost"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// A request has up to four ways to go out, and the cheapest by expected
// billed cost is sent (see cost.Model.Expected):
//
//   - full: every receipt and fold the rules allow now, with the compaction
//     boundary of the current turn count (new vaulting and folding inside
//     the cached prefix);
//   - boundary: the full rules for receipts, but the compaction boundary the
//     previous forwarded request used, so no new fold moves into the prefix;
//   - stable: the previous forwarded request's decisions replayed byte for
//     byte for everything it carried (its boundary, its receipts, and the
//     results it sent inline stay inline); new receipts only in what is new;
//   - the original bytes, the third veto of the gate (not_cheaper).
//
// Rewriting a cached prefix pays once (cache writes instead of reads) and
// saves on every following request; it is chosen when it pays back within
// the horizon, and always when the cache is cold. Receipts stay for the
// rest of the conversation (the receipt horizon, at least 8 requests); a
// fold boundary moves again a few turns later, so a plan that moves it
// must also pay back within the fold horizon (cost_horizon). A tool
// introduction cost (the recovery tool appended to tools, which renders
// first) belongs in the variant loop of choose, on the plan's segments.
type variant struct {
	aligned int  // compaction boundary in turns
	replay  bool // replay the previous request's receipts
}

// choice is the cost decision of one request, kept for the gate and the
// record.
type choice struct {
	model   cost.Model
	horizon float64 // the receipt horizon: the third veto's and the reported figures'
	tpb     float64 // estimated tokens per byte
	now     time.Time
	prev    *cacheState // nil when no state was recorded or it is unreadable
	warm    bool
	// declined: the cheapest plan changes nothing although another would
	// have rewritten the request (reported as not_cheaper).
	declined bool

	orig, sent costPlan
	segs       []seg // rendered segments of the original, and of the chosen plan
	sentSegs   []seg
	// With breakpoints (Anthropic): per head and unit, whether it carries
	// a cache_control marker, and per segment of the original and of the
	// chosen plan whether one ends there. nil for automatic caching.
	marked         []bool
	segsBP, sentBP []bool
	// billed is the chosen plan as the provider bills it, and round the
	// recovery round it is expected to cause (recovery_tool.go).
	billed, round costPlan
	rawCached     int // bytes a provider would hold had every request gone out raw
}

// costPlan is a plan's rendered size and cached prefix, in bytes.
type costPlan struct{ total, cached int }

// expected is a plan's expected billed cost over the chosen plan's horizon.
func (ch *choice) expected(cp costPlan, tpb float64) float64 {
	return ch.expectedOver(cp, tpb, ch.horizon)
}

func (ch *choice) expectedOver(cp costPlan, tpb, horizon float64) float64 {
	return ch.model.Expected(cost.Plan{Tokens: float64(cp.total) * tpb, Cached: float64(cp.cached) * tpb}, horizon)
}

func (ch *choice) price(cp costPlan, tpb float64) float64 {
	return ch.model.Price(float64(cp.total)*tpb, float64(cp.cached)*tpb)
}

// choose builds the candidate plans of a request and returns the cheapest
// compiled one with its cost decision; with the cost model off it returns
// the full plan and no decision (bytes and tokens judge alone).
func (c *Compiler) choose(base *plan, format provider.Format, req Request) (*plan, *choice) {
	cur := 0
	if base.hist != nil {
		cur = alignedTurns(len(base.hist.turns))
	}
	if c.opts.Cost.Off {
		p := c.planned(base, variant{aligned: cur}, nil)
		p.tool = c.planTool(format, p)
		return p, nil
	}
	ch := c.newChoice(base, format, req)
	steps, prevAligned := 0, 0
	if ch.prev != nil {
		steps, prevAligned = ch.prev.steps, ch.prev.aligned
	}
	foldHorizon, receiptHorizon := c.opts.Cost.Horizon(steps), c.opts.Cost.ReceiptHorizon(steps)
	ch.segs, ch.segsBP = base.rendered(false, ch.marked)
	ch.orig = ch.costOf(ch.segs)
	if ch.warm && ch.prev.head == base.head && base.lineage.Length < len(ch.segs) {
		ch.rawCached = ch.segs[base.lineage.Length].end
	}
	best, rewrites := c.judge(base, format, ch, ch.variants(cur), prevAligned, receiptHorizon, foldHorizon)
	ch.horizon, ch.sent, ch.sentSegs, ch.sentBP = receiptHorizon, best.cp, best.segs, best.bps
	ch.billed, ch.round = best.billed, best.round
	ch.declined = rewrites && len(best.p.edits) == 0
	return best.p, ch
}

// newChoice starts the cost decision of base: the model's prices for
// format and base's model, the breakpoints the client marked, and the
// conversation's recorded cache state and whether it is still warm.
func (c *Compiler) newChoice(base *plan, format provider.Format, req Request) *choice {
	d := base.d
	ch := &choice{model: c.opts.Cost.Model(format, d.model), now: req.Time, tpb: c.opts.Cost.Tokens(1)}
	if ch.now.IsZero() {
		ch.now = time.Now()
	}
	if ch.model.Breakpoints {
		marked, count, oneHour := breakpointMarks(d)
		switch {
		case count == 0:
			ch.model = ch.model.Uncached() // no breakpoint: the provider caches nothing
		case oneHour:
			ch.model.TTL, ch.model.CacheWrite = ch.model.TTL1h, ch.model.CacheWrite1h
			ch.marked = marked
		default:
			ch.marked = marked
		}
		base.blocks = receiptBlocksFor(d, ch.marked, oneHour, count)
	}
	base.head, base.headSize = headFingerprint(d)
	if base.lineage.Found {
		ch.prev = decodeCacheState(base.lineage.Cache)
	}
	if ch.prev != nil {
		ch.warm = ch.now.Sub(ch.prev.time()) <= ch.model.TTL && !c.usage.cold(req.Scope, base.lineage.Ancestor, ch.model)
	}
	return ch
}

// variants are the plans choose compares: folding up to cur turns, and,
// after a recorded request, keeping its fold boundary and replaying it.
func (ch *choice) variants(cur int) []variant {
	variants := []variant{{aligned: cur}}
	if ch.prev != nil {
		if pa := min(ch.prev.aligned, cur); pa != cur {
			variants = append(variants, variant{aligned: pa})
		}
		variants = append(variants, variant{aligned: min(ch.prev.aligned, cur), replay: true})
	}
	return variants
}

// judged is a compiled variant with its costs.
type judged struct {
	p                 *plan
	cp                costPlan
	segs              []seg
	bps               []bool
	billed, round     costPlan // as the provider bills it, and the recovery round it is expected to cause
	overRecv, overFld float64  // saving against the original (negative: cheaper) over each horizon
}

// judge compiles every variant and returns the cheapest, and whether any
// variant rewrote at all. Receipts stay for the rest of the conversation:
// every plan is judged over the receipt horizon by what it saves against
// the original. A plan that moves the fold boundary (past prevAligned)
// must also beat the best plan that does not over the fold horizon
// (cost_horizon): its boundary moves again a few turns later, rewriting
// the prompt once more.
func (c *Compiler) judge(base *plan, format provider.Format, ch *choice, variants []variant, prevAligned int, receiptHorizon, foldHorizon float64) (best *judged, rewrites bool) {
	rel := func(cp costPlan, h float64) float64 {
		return ch.expectedOver(cp, ch.tpb, h) - ch.expectedOver(ch.orig, ch.tpb, h)
	}
	var bestFold *judged
	for _, v := range variants {
		p := c.planned(base, v, ch.prev)
		p.choice = ch
		p.tool = c.planTool(format, p)
		rsegs, bps := p.rendered(true, ch.marked)
		segs, cp, billed := ch.withTool(p, rsegs) // recovery_tool.go: the tool re-writes what follows it
		round := ch.roundAfter(p, cp)             // and a receipt the model just recovered costs a round
		roundCost := ch.price(round, ch.tpb)
		rewrites = rewrites || len(p.edits) > 0
		j := &judged{p: p, cp: cp, segs: segs, bps: bps, billed: billed, round: round,
			overRecv: rel(cp, receiptHorizon) + roundCost, overFld: rel(cp, foldHorizon) + roundCost}
		// Strictly cheaper wins: ties keep the earlier (fuller) plan.
		if len(p.folds()) > 0 && v.aligned > prevAligned {
			if bestFold == nil || j.overRecv < bestFold.overRecv {
				bestFold = j
			}
		} else if best == nil || j.overRecv < best.overRecv {
			best = j
		}
	}
	if best == nil || (bestFold != nil && bestFold.overRecv < best.overRecv && bestFold.overFld < best.overFld) {
		best = bestFold
	}
	return best, rewrites
}

// costOf sizes rendered segments and finds the cached prefix among them.
func (ch *choice) costOf(segs []seg) costPlan {
	if len(segs) == 0 {
		return costPlan{}
	}
	cp := costPlan{total: segs[len(segs)-1].end}
	if ch.warm {
		cp.cached = cachedPrefix(ch.prev.segs, ch.prev.bps, segs)
		if ch.marked != nil {
			// An earlier prompt's entry, still live, may reach further.
			for _, s := range segs[:len(segs)-1] {
				if s.end > cp.cached && ch.liveEntry(s.fp) {
					cp.cached = s.end
				}
			}
		}
	}
	return cp
}

// liveEntry reports whether fp is the prefix of a cache entry an earlier
// prompt wrote at a breakpoint that the TTL has not expired yet.
func (ch *choice) liveEntry(fp uint64) bool {
	for _, e := range ch.prev.older {
		if e.fp == fp && ch.now.Sub(time.Unix(0, e.at)) <= ch.model.TTL {
			return true
		}
	}
	return false
}

// olderEntries are the breakpoint entries to record with what goes out at
// ch.now: the previous prompt's and the earlier ones still live, those the
// prompt being sent (segs) reads refreshed, newest first, at most
// maxOlderEntries. The prompt's own breakpoints are in its segments.
func (ch *choice) olderEntries(segs []seg, bps []bool) []entryRef {
	if ch.prev == nil || ch.marked == nil {
		return nil
	}
	var out []entryRef
	seen := func(fp uint64) bool {
		if slices.ContainsFunc(out, func(e entryRef) bool { return e.fp == fp }) {
			return true
		}
		for i, s := range segs {
			if s.fp == fp && i < len(bps) && bps[i] {
				return true // the new prompt's own breakpoint
			}
		}
		return false
	}
	add := func(e entryRef) {
		if ch.now.Sub(time.Unix(0, e.at)) > ch.model.TTL || seen(e.fp) {
			return
		}
		if slices.ContainsFunc(segs, func(s seg) bool { return s.fp == e.fp }) {
			e.at = ch.now.UnixNano() // read by this prompt: refreshed
		}
		out = append(out, e)
	}
	for i := len(ch.prev.segs) - 1; i >= 0; i-- {
		if i < len(ch.prev.bps) && ch.prev.bps[i] {
			add(entryRef{fp: ch.prev.segs[i].fp, at: ch.prev.at})
		}
	}
	for _, e := range ch.prev.older {
		add(e)
	}
	slices.SortStableFunc(out, func(a, b entryRef) int { return cmp.Compare(b.at, a.at) })
	if len(out) > maxOlderEntries {
		out = out[:maxOlderEntries]
	}
	return out
}

// planned makes the decisions of one variant on a fresh copy of base.
// prev is the conversation's recorded cache state (nil when none): the
// stable variant replays it, and duplicates keep the copy it carried.
func (c *Compiler) planned(base *plan, v variant, prev *cacheState) *plan {
	if base.foldMemo == nil {
		base.foldMemo = map[int]fold{}
		base.receiptTexts = make([]string, len(base.d.slots))
	}
	p := &plan{d: base.d, chain: base.chain, lineage: base.lineage, eligible: base.eligible, hist: base.hist, held: base.held,
		chainBase: base.chainBase, continued: base.continued, contCache: base.contCache, unitChain: base.unitChain,
		head: base.head, headSize: base.headSize, foldMemo: base.foldMemo, receiptTexts: base.receiptTexts,
		variant: v, prev: prev, recovery: base.recovery, blocks: base.blocks,
		reinlineMode: c.opts.ReinlineRecovered}
	c.decide(p)
	if p.hist != nil && c.opts.Compaction.Enabled {
		p.compaction = c.compact(p, p.hist, v.aligned)
	}
	p.build()
	return p
}

// alignedTurns is the compaction boundary of a turn count: rounded down to
// a multiple of compactBlock, so it moves once every compactBlock turns.
func alignedTurns(turns int) int { return turns / compactBlock * compactBlock }

// costs fills the result's cost figures. This request: the original's
// billed cost as if every request had gone out raw (CostRaw), and that of
// what was sent (CostSent), which may exceed it when a plan pays back over
// the horizon. Over the horizon: the third veto's figures
// (CostHorizonRaw/CostHorizonSent), which never show a rewrite dearer
// than the original. Measured token counts replace the byte estimate.
func (ch *choice) costs(res *Result, accepted bool) {
	tpbRaw, tpbSent := ch.tpbs(res, res.RawBytes, res.SentBytes)
	res.CostRaw = ch.price(costPlan{total: ch.orig.total, cached: ch.rawCached}, tpbRaw)
	res.CostHorizon = ch.horizon
	res.CostHorizonRaw = ch.expected(ch.orig, tpbRaw)
	sent, tpb := ch.orig, tpbRaw
	if accepted {
		sent, tpb = ch.billed, tpbSent
	}
	res.CostSent = ch.price(sent, tpb)
	res.CostHorizonSent = ch.expected(sent, tpb)
	res.expectRead = ch.model.Cacheable(float64(sent.cached) * tpb)
}

// tpbs is the tokens per byte of the original (rawLen bytes) and of the
// rewrite (outLen bytes): measured by the gate's token counts when it has
// them, else the configured estimate.
func (ch *choice) tpbs(res *Result, rawLen, outLen int) (raw, sent float64) {
	if res.Tokens.Status.Measured() && res.Tokens.Raw > 0 && res.Tokens.Sent > 0 && rawLen > 0 && outLen > 0 {
		return float64(res.Tokens.Raw) / float64(rawLen), float64(res.Tokens.Sent) / float64(outLen)
	}
	return ch.tpb, ch.tpb
}

// cheaper is the gate's third veto: the chosen plan's expected billed cost
// (with the recovery round it is expected to cause) must not exceed the
// original's, both over the same horizon (this request plus ch.horizon
// following requests reading the prompt back), both from the provider's
// cache as the conversation left it. Measured token counts replace the
// byte estimate on each side.
func (ch *choice) cheaper(res *Result, rawLen, outLen int) bool {
	tpbRaw, tpbSent := ch.tpbs(res, rawLen, outLen)
	return ch.expected(ch.sent, tpbSent)+ch.price(ch.round, tpbSent) <= ch.expected(ch.orig, tpbRaw)
}

// state is the cache state to record for what went upstream.
func (ch *choice) state(p *plan, forwarded bool) []byte {
	st := cacheState{steps: 1, at: ch.now.UnixNano(), aligned: -1, head: p.head, segs: ch.segs, bps: ch.segsBP}
	if ch.prev != nil {
		st.steps = ch.prev.steps + 1
	}
	st.tool = stickyTool(p, ch.prev, forwarded)
	if forwarded {
		st.aligned, st.segs, st.bps = p.variant.aligned, ch.sentSegs, ch.sentBP
		for i, s := range p.d.slots {
			if p.receipt[i] {
				st.receipted = append(st.receipted, short(s.text.digest))
			}
		}
		slices.Sort(st.receipted)
		st.receipted = slices.Compact(st.receipted)
		if p.reinlineMode != ReinlineOff {
			st.recovered = recoveredState(p) // the next decision re-inlines them (on) or weighs that against a round (cost)
		}
	} else if st.tool {
		keepStickyRewrite(&st, ch.prev)
	}
	st.older = ch.olderEntries(st.segs, st.bps)
	return st.encode()
}
