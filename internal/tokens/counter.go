package tokens

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// Statuses of a artifact.TokenCount.
const (
	StatusExact    = artifact.TokensExact
	StatusEstimate = artifact.TokensEstimate
	StatusNone     = artifact.TokensNone
	StatusBudget   = artifact.TokensBudget
)

// Defaults of Config.
const (
	DefaultBudget     = 250 * time.Millisecond
	DefaultCacheBytes = 64 << 20
)

// maxBacklog bounds the bytes being tokenized at once: under a flood of new
// content, requests that would queue behind more than this skip counting at
// once instead of piling up goroutines. Work a request gave up on (past its
// budget) stops (job.abandon); only the pieces being counted then finish.
const maxBacklog = 16 << 20

// Config configures a Counter. Zero values mean defaults.
type Config struct {
	Tokenizer  string        // "auto" (default), "o200k_base", "cl100k_base", "off"
	Budget     time.Duration // default 250ms: counting never delays a request longer; past it Status "budget"
	CacheBytes int64         // default 64 MiB: memory bound of the count caches (pieces, and 1/8 for the word memo)
}

// Counter counts tokens of request bodies. It is safe for concurrent use.
type Counter struct {
	fixed  *encoding // nil for auto
	off    bool
	budget time.Duration
	*state // shared with the Counters made by WithBudget
}

// state is what Counters of one tokenizer and cache size share whatever
// their budgets: the count caches and the work in flight.
type state struct {
	cache   *cache
	memos   []*memo      // by encoding id
	backlog atomic.Int64 // bytes queued or being tokenized
	// tokenized counts the bytes of pieces the workers counted (tests)
	tokenized atomic.Int64
	// maxBacklog, but for tests
	backlogMax int64
	// beforePiece, when set (tests), is called by a worker before it
	// counts each piece it took: a test holds the workers there to keep
	// queued work queued.
	beforePiece func()

	mu       sync.Mutex
	inflight map[key]*flight // pieces being counted
}

// New returns a Counter for cfg.
func New(cfg Config) (*Counter, error) {
	c := &Counter{budget: cfg.Budget, state: &state{inflight: map[key]*flight{}, backlogMax: maxBacklog}}
	t := cmp.Or(strings.ToLower(strings.TrimSpace(cfg.Tokenizer)), "auto")
	if !provider.KnownTokenizer(t) {
		return nil, fmt.Errorf("tokens: unknown tokenizer %q (want %s)", cfg.Tokenizer, provider.TokenizerChoices)
	}
	switch t {
	case "auto":
	case "off":
		c.off = true
	default:
		if c.fixed = encodingNamed(t); c.fixed == nil {
			return nil, fmt.Errorf("tokens: no encoding %q", t)
		}
	}
	if cfg.Budget < 0 || cfg.CacheBytes < 0 {
		return nil, fmt.Errorf("tokens: negative budget %v or cache size %d", cfg.Budget, cfg.CacheBytes)
	}
	if c.budget == 0 {
		c.budget = DefaultBudget
	}
	// The tables are built here, at provision, once per process: never on
	// a request.
	if !c.off {
		for _, e := range encodings {
			if c.fixed != nil && e != c.fixed {
				continue
			}
			if _, err := e.load(); err != nil {
				return nil, err
			}
		}
	}
	size := cfg.CacheBytes
	if size == 0 {
		size = DefaultCacheBytes
	}
	// The memos get 1/8 of the memory, split between the encodings.
	c.cache = newCache(size - size/8)
	for range encodings {
		c.memos = append(c.memos, newMemo(size/8/int64(len(encodings))))
	}
	return c, nil
}

// WithBudget returns a Counter like c with another budget (0: the default)
// that shares c's caches and work in flight: a reload that changes only the
// budget keeps everything counted so far. The tables are per process anyway.
func (c *Counter) WithBudget(budget time.Duration) (*Counter, error) {
	if budget < 0 {
		return nil, fmt.Errorf("tokens: negative budget %v", budget)
	}
	if budget == 0 {
		budget = DefaultBudget
	}
	d := *c
	d.budget = budget
	return &d, nil
}

// Count counts the tokens of body as the tokenizer for model sees it. It
// returns within the budget (or when ctx is done) with Status "budget" if
// counting has not finished; the unfinished work stops there (the pieces
// being counted finish), and what was counted stays cached, so a resent
// body goes on from there.
func (c *Counter) Count(ctx context.Context, model string, body []byte) artifact.TokenCount {
	return c.CountHinted(ctx, model, body, nil)
}

// CountHinted is Count with hints: ascending offsets of body where its
// messages start (the compiler's HintedCounter). A resent message is then one
// lookup; the count is the same whatever the hints (hints.go).
func (c *Counter) CountHinted(ctx context.Context, model string, body []byte, hints []int) artifact.TokenCount {
	return c.CountHeld(ctx, model, body, hints, nil)
}

// CountHeld is CountHinted that reads body after it returns, for work it
// left past the budget, under hold instead of from a copy
// (the compiler's HeldCounter); nil hold: a copy.
func (c *Counter) CountHeld(ctx context.Context, model string, body []byte, hints []int, hold artifact.Hold) artifact.TokenCount {
	if c.off {
		return artifact.TokenCount{Status: StatusNone}
	}
	own := provider.EncodingOf(model)
	enc := c.fixed
	if enc == nil {
		if enc = encodingNamed(own); enc == nil {
			return artifact.TokenCount{Status: StatusNone}
		}
	}
	// Stop waiting budget/8 early: when every P is tokenizing, the timer's
	// goroutine can wait for a preemption or a GC mark phase before it runs
	// again (tens of milliseconds on a small machine), and the budget is a
	// ceiling.
	deadline := time.Now().Add(c.budget - c.budget/8)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	n, ok := c.count(ctx, enc, body, hints, hold, deadline)
	if !ok {
		return artifact.TokenCount{Encoding: enc.name, Status: StatusBudget}
	}
	if enc.name == own {
		return artifact.TokenCount{N: n, Encoding: enc.name, Exact: true, Status: StatusExact}
	}
	return artifact.TokenCount{N: n, Encoding: enc.name, Status: StatusEstimate}
}

// segMiss is a segment that was not cached whole: its count is the cached
// part of its pieces plus the flights waits[from:to], and is remembered
// under k once they land.
type segMiss struct {
	k        key
	cached   int
	from, to int
}

// count sums cached segment and piece counts and tokenizes the missing
// pieces in parallel; false when the deadline or ctx came first. The
// workers start at the first missing piece, while the rest of body is
// still being split: on a cold body the split and its lookups are a
// sizeable part of the work, and they overlap the counting instead of
// coming first.
// hold, if not nil, lets the workers read body after count returns (job).
func (c *Counter) count(ctx context.Context, enc *encoding, body []byte, hints []int, hold artifact.Hold, deadline time.Time) (int, bool) {
	t := &tally{c: c, enc: enc, body: body, hold: hold}
	finished := false
	defer func() {
		if t.j != nil && !finished {
			t.j.abandon() // also on a panic: the workers return, the hold is given back
		}
	}()
	if len(hints) == 0 {
		split(body, minPiece, avgBits, t.piece)
	} else {
		segments(body, hints, t.segment)
	}
	if t.j != nil {
		t.j.close()
	}
	if t.full {
		return 0, false
	}
	if len(t.waits) == 0 {
		finished = true
		c.landSegments(t.segs, t.waits)
		return t.total, true
	}
	// The budget is a ceiling, whichever of the deadline and the last
	// count a select would see first: a split that took the whole budget,
	// or counts that landed after it, are "budget" (the flights go on and
	// fill the cache, so the same body is counted on a retry).
	if !time.Now().Before(deadline) {
		return 0, false
	}
	if !t.await(ctx, deadline) {
		return 0, false
	}
	finished = true // every flight landed: nothing is left to drop
	if time.Now().After(deadline) {
		return 0, false
	}
	c.landSegments(t.segs, t.waits)
	return t.total, true
}

// tally is one count's state while its body is split: the total of what
// was found cached, and the missing pieces to wait for.
type tally struct {
	c     *Counter
	enc   *encoding
	body  []byte
	hold  artifact.Hold
	total int

	waits      []*flight       // missing pieces in body order, repeats included
	waitPieces [][]byte        // their bytes
	mine       map[key]*flight // pieces repeated inside this body are counted once
	segs       []segMiss
	j          *job // made at the first missing piece: a warm count needs none
	full       bool // the backlog refused a piece: no count
}

// piece adds piece p: its cached count, or a flight to wait for (queued on
// the job when this count owns it).
func (t *tally) piece(p []byte) {
	if t.full {
		return
	}
	k := keyOf(t.enc.id, p)
	if n, ok := t.c.cache.get(k); ok {
		t.total += n
		return
	}
	f := t.mine[k]
	if f == nil {
		var owned bool
		if f, owned = t.c.join(k); owned {
			if t.j == nil {
				t.j = newJob(t.c, t.enc, t.body, t.hold)
			}
			if !t.j.add(f, p) {
				t.full = true
				return
			}
		}
		if t.mine == nil {
			t.mine = map[key]*flight{}
		}
		t.mine[k] = f
	}
	t.waits = append(t.waits, f)
	t.waitPieces = append(t.waitPieces, p)
}

// segment adds segment s: its cached count, or its pieces, remembering it
// as a segMiss.
func (t *tally) segment(s []byte) {
	if t.full {
		return
	}
	k := keyOf(t.enc.id, s)
	if n, ok := t.c.cache.get(k); ok {
		t.total += n
		return
	}
	before, from := t.total, len(t.waits)
	split(s, minPiece, avgBits, t.piece)
	t.segs = append(t.segs, segMiss{k: k, cached: t.total - before, from: from, to: len(t.waits)})
}

// await adds the counts of the flights waited for as they land; false
// when one failed, or the deadline or ctx came first.
func (t *tally) await(ctx context.Context, deadline time.Time) bool {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for i, f := range t.waits {
		select {
		case <-f.done:
			if !f.ok && f.dropped && time.Now().Before(deadline) {
				// Another request's job gave up on this piece: count it here.
				n, ok := t.c.countHere(t.enc, f.k, t.waitPieces[i])
				if !ok {
					return false
				}
				t.total += n
				continue
			}
			if !f.ok {
				return false
			}
			t.total += f.n
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// landSegments remembers the count of every segment whose pieces are all
// counted. A segment that is a single piece is already cached as one.
func (c *Counter) landSegments(segs []segMiss, waits []*flight) {
	for _, s := range segs {
		n := s.cached
		for _, f := range waits[s.from:s.to] {
			n += f.n
		}
		c.cache.put(s.k, n)
	}
}

// flight is the counting of one piece, shared by every request that needs
// it meanwhile, so a resent or concurrent body never doubles the work.
type flight struct {
	k       key
	done    chan struct{} // closed when n and ok are set
	n       int
	ok      bool
	dropped bool // not counted: the request whose job owned it gave up (set before done)
}

// countHere counts piece p (key k) on the caller's goroutine: a piece
// another request's abandoned job dropped while this one waited for it.
func (c *Counter) countHere(enc *encoding, k key, p []byte) (int, bool) {
	r, err := enc.load()
	if err != nil {
		return 0, false
	}
	n, ok := c.memos[enc.id].count(enc, r, nil, p)
	if ok {
		c.cache.put(k, n)
	}
	return n, ok
}

// join returns the flight counting k and whether the caller must count it
// (no one else is).
func (c *Counter) join(k key) (*flight, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.inflight[k]; f != nil {
		return f, false
	}
	f := &flight{k: k, done: make(chan struct{})}
	if n, ok := c.cache.get(k); ok { // landed since the caller looked
		f.n, f.ok = n, true
		close(f.done)
		return f, false
	}
	c.inflight[k] = f
	return f, true
}

// land resolves f and lets later requests find its count in the cache.
func (c *Counter) land(f *flight, n int, ok bool) {
	if ok {
		c.cache.put(f.k, n)
	}
	c.mu.Lock()
	delete(c.inflight, f.k)
	c.mu.Unlock()
	f.n, f.ok = n, ok
	close(f.done)
}
