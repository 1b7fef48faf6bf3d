package compiler

import (
	"bytes"
	"slices"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/cost"
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
// the horizon, and always when the cache is cold.
type variant struct {
	aligned int  // compaction boundary in turns
	replay  bool // replay the previous request's receipts
}

// choice is the cost decision of one request, kept for the gate and the
// record.
type choice struct {
	model   cost.Model
	horizon float64
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
	// billed is the chosen plan as the provider bills it, and round the
	// recovery round it is expected to cause (recovery_tool.go).
	billed, round costPlan
	rawCached     int // bytes a provider would hold had every request gone out raw
}

// costPlan is a plan's rendered size and cached prefix, in bytes.
type costPlan struct{ total, cached int }

func (ch *choice) expected(cp costPlan, tpb float64) float64 {
	return ch.model.Expected(cost.Plan{Tokens: float64(cp.total) * tpb, Cached: float64(cp.cached) * tpb}, ch.horizon)
}

func (ch *choice) price(cp costPlan, tpb float64) float64 {
	return ch.model.Price(float64(cp.total)*tpb, float64(cp.cached)*tpb)
}

var cacheControl = []byte(`"cache_control"`)

var oneHourTTL = [][]byte{[]byte(`"ttl":"1h"`), []byte(`"ttl": "1h"`)}

// choose builds the candidate plans of a request and returns the cheapest
// compiled one with its cost decision; with the cost model off it returns
// the full plan and no decision (bytes and tokens judge alone).
func (c *Compiler) choose(base *plan, format string, req Request) (*plan, *choice) {
	cur := 0
	if base.hist != nil {
		cur = alignedTurns(len(base.hist.turns))
	}
	if c.opts.Cost.Off {
		p := c.planned(base, variant{aligned: cur}, nil)
		p.tool = c.planTool(format, p)
		return p, nil
	}
	d := base.d
	ch := &choice{model: c.opts.Cost.Model(format, d.model), now: req.Time, tpb: c.opts.Cost.Tokens(1)}
	if ch.now.IsZero() {
		ch.now = time.Now()
	}
	if ch.model.Breakpoints {
		switch {
		case !bytes.Contains(d.src, cacheControl):
			ch.model = ch.model.Uncached() // no breakpoint: the provider caches nothing
		case bytes.Contains(d.src, oneHourTTL[0]) || bytes.Contains(d.src, oneHourTTL[1]):
			ch.model.TTL, ch.model.CacheWrite = ch.model.TTL1h, ch.model.CacheWrite1h
		}
	}
	base.head, base.headSize = headFingerprint(d)
	if base.lineage.Found {
		ch.prev = decodeCacheState(base.lineage.Cache)
	}
	steps := 0
	if ch.prev != nil {
		steps = ch.prev.steps
		ch.warm = ch.now.Sub(ch.prev.time()) <= ch.model.TTL && !c.usage.cold(req.Scope, base.lineage.Ancestor, ch.model)
	}
	ch.horizon = c.opts.Cost.Horizon(steps)

	variants := []variant{{aligned: cur}}
	if ch.prev != nil {
		if pa := min(ch.prev.aligned, cur); pa != cur {
			variants = append(variants, variant{aligned: pa})
		}
		variants = append(variants, variant{aligned: min(ch.prev.aligned, cur), replay: true})
	}
	ch.segs = base.rendered(false)
	ch.orig = ch.costOf(ch.segs)
	if ch.warm && ch.prev.head == base.head && base.lineage.Length < len(ch.segs) {
		ch.rawCached = ch.segs[base.lineage.Length].end
	}
	var best *plan
	var bestCost float64
	rewrites := false
	for _, v := range variants {
		p := c.planned(base, v, ch.prev)
		p.choice = ch
		p.tool = c.planTool(format, p)
		segs, cp, billed := ch.withTool(p, p.rendered(true)) // recovery_tool.go: the tool re-writes what follows it
		round := ch.roundAfter(p, cp)                        // and a receipt the model just recovered costs a round
		rewrites = rewrites || len(p.edits) > 0
		// Strictly cheaper wins: ties keep the earlier (fuller) plan.
		if e := ch.expected(cp, ch.tpb) + ch.price(round, ch.tpb); best == nil || e < bestCost {
			best, bestCost, ch.sent, ch.sentSegs, ch.billed, ch.round = p, e, cp, segs, billed, round
		}
	}
	ch.declined = rewrites && len(best.edits) == 0
	return best, ch
}

// costOf sizes rendered segments and finds the cached prefix among them.
func (ch *choice) costOf(segs []seg) costPlan {
	if len(segs) == 0 {
		return costPlan{}
	}
	cp := costPlan{total: segs[len(segs)-1].end}
	if ch.warm {
		cp.cached = cachedPrefix(ch.prev.segs, segs)
	}
	return cp
}

// planned makes the decisions of one variant on a fresh copy of base.
// prev is the conversation's recorded cache state (nil when none): the
// stable variant replays it, and duplicates keep the copy it carried.
func (c *Compiler) planned(base *plan, v variant, prev *cacheState) *plan {
	if base.foldMemo == nil {
		base.foldMemo = map[int]fold{}
	}
	p := &plan{d: base.d, chain: base.chain, lineage: base.lineage, eligible: base.eligible, hist: base.hist,
		head: base.head, headSize: base.headSize, foldMemo: base.foldMemo, variant: v, prev: prev, recovery: base.recovery}
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

// costs fills the result's cost figures: the original's expected billed
// cost as if every request had gone out raw, and that of what was sent. A
// measured token count replaces the byte estimate.
func (ch *choice) costs(res *Result, accepted bool) {
	tpbRaw, tpbSent := ch.tpb, ch.tpb
	if res.Tokens.Status.Measured() && res.RawBytes > 0 && res.SentBytes > 0 {
		tpbRaw = float64(res.Tokens.Raw) / float64(res.RawBytes)
		tpbSent = float64(res.Tokens.Sent) / float64(res.SentBytes)
	}
	res.CostRaw = ch.price(costPlan{total: ch.orig.total, cached: ch.rawCached}, tpbRaw)
	sent, tpb := ch.orig, tpbRaw
	if accepted {
		sent, tpb = ch.billed, tpbSent
	}
	res.CostSent = ch.price(sent, tpb)
	res.expectRead = ch.model.Cacheable(float64(sent.cached) * tpb)
}

// cheaper is the gate's third veto: the chosen plan's expected billed cost
// must not exceed the original's. Measured token counts replace the byte
// estimate on each side.
func (ch *choice) cheaper(res *Result, rawLen, outLen int) bool {
	tpbRaw, tpbSent := ch.tpb, ch.tpb
	if res.Tokens.Status.Measured() && res.Tokens.Raw > 0 && res.Tokens.Sent > 0 && rawLen > 0 && outLen > 0 {
		tpbRaw = float64(res.Tokens.Raw) / float64(rawLen)
		tpbSent = float64(res.Tokens.Sent) / float64(outLen)
	}
	return ch.expected(ch.sent, tpbSent)+ch.price(ch.round, tpbSent) <= ch.expected(ch.orig, tpbRaw)
}

// state is the cache state to record for what went upstream.
func (ch *choice) state(p *plan, forwarded bool) []byte {
	st := cacheState{steps: 1, at: ch.now.UnixNano(), aligned: -1, head: p.head, segs: ch.segs}
	if ch.prev != nil {
		st.steps = ch.prev.steps + 1
	}
	st.tool = stickyTool(p, ch.prev, forwarded)
	if forwarded {
		st.aligned, st.segs = p.variant.aligned, ch.sentSegs
		for i, s := range p.d.slots {
			if p.receipt[i] {
				st.receipted = append(st.receipted, short(s.text.digest))
			}
		}
		slices.Sort(st.receipted)
		st.receipted = slices.Compact(st.receipted)
		st.recovered = recoveredState(p) // the next decision weighs re-inlining them against a round
	} else if st.tool {
		keepStickyRewrite(&st, ch.prev)
	}
	return st.encode()
}
