package cost

// Cacheable is how many of cached tokens the provider actually reads: whole
// Granularity blocks, and nothing below MinPrefix.
func (m Model) Cacheable(cached float64) float64 {
	if cached < float64(m.MinPrefix) || cached <= 0 {
		return 0
	}
	if g := float64(m.Granularity); g > 1 {
		cached = float64(int64(cached/g)) * g
	}
	return cached
}

// Price is the billed input cost of a prompt of total tokens whose first
// cached tokens the provider's cache holds: the cacheable part at
// CacheRead, the rest at CacheWrite (Anthropic writes the uncached part up
// to its breakpoints at a premium; OpenAI writes for free, CacheWrite 1).
func (m Model) Price(total, cached float64) float64 {
	read := min(m.Cacheable(cached), total)
	return m.CacheRead*read + m.CacheWrite*(total-read)
}

// Charge is the billed cost of tokens by how the provider billed them:
// read from the cache, written to it (written1h of them with the 1-hour
// TTL, at CacheWrite1h when the model has one) and plain uncached input.
func (m Model) Charge(read, written, written1h, plain float64) float64 {
	w1h := m.CacheWrite
	if m.CacheWrite1h > 0 {
		w1h = m.CacheWrite1h
	}
	written1h = min(written1h, written)
	return m.CacheRead*read + m.CacheWrite*(written-written1h) + w1h*written1h + plain
}

// Uncached is the model of a request that does not use the cache at all
// (Anthropic without any cache_control breakpoint): every token at the base
// price.
func (m Model) Uncached() Model {
	m.CacheRead, m.CacheWrite, m.CacheWrite1h = 1, 1, 1
	return m
}

// Plan is one way of sending a request, as the decision sees it: its size
// and how much of it the provider's cache holds now.
type Plan struct {
	Tokens float64 // the prompt's tokens in render order
	Cached float64 // tokens of its prefix the cache holds (before Cacheable)
}

// Expected is a plan's expected billed cost over the horizon: this request
// (Price) plus, for each of the horizon's following requests, reading this
// plan's prompt back from the cache. What later requests add is the same
// for every plan, so it is left out: only differences between plans matter.
func (m Model) Expected(p Plan, horizon float64) float64 {
	return m.Price(p.Tokens, p.Cached) + horizon*m.CacheRead*m.Cacheable(p.Tokens) +
		horizon*(p.Tokens-m.Cacheable(p.Tokens))
}

// Cheapest returns the index of the plan with the lowest Expected cost; on
// a tie the earlier plan wins, so the caller lists its preferred plans
// first. It returns -1 for no plans.
func (m Model) Cheapest(plans []Plan, horizon float64) int {
	best, bestCost := -1, 0.0
	for i, p := range plans {
		if c := m.Expected(p, horizon); best < 0 || c < bestCost {
			best, bestCost = i, c
		}
	}
	return best
}
