package cost

import (
	"bytes"
	"time"
)

// Simulator bills the requests of one session as the provider's prompt
// cache would: it keeps the cache entries the session's requests created
// (with their last use, for the TTL) and prices each new request by the
// longest entry it extends. Anthropic: entries exist only at cache_control
// breakpoints, the uncached part up to the last breakpoint is written at
// CacheWrite (CacheWrite1h for a 1-hour breakpoint), the rest is plain
// input, a request without breakpoints uses no cache. OpenAI: every prompt
// of at least MinPrefix tokens is an entry, hits count in Granularity
// blocks, nothing is charged for writing. Tokens are estimated from bytes
// with Config.Tokens.
type Simulator struct {
	Model   Model
	Config  Config
	entries []entry
}

type entry struct {
	prefix []byte
	used   time.Time
	ttl    time.Duration
}

// Bill is what one request was charged, in base-input-token units.
type Bill struct {
	Tokens, Read, Written, Plain float64 // tokens by how they were billed
	Cost                         float64
}

// maxEntries bounds the entries kept per session (the most recently used
// survive).
const maxEntries = 16

// Step bills one request sent at time at.
func (s *Simulator) Step(r Rendered, at time.Time) Bill {
	m := s.Model
	live := s.entries[:0]
	for _, e := range s.entries {
		if at.Sub(e.used) <= e.ttl {
			live = append(live, e)
		}
	}
	s.entries = live
	total := s.Config.Tokens(len(r.Bytes))
	b := Bill{Tokens: total}
	if m.Breakpoints && len(r.Breakpoints) == 0 {
		b.Plain, b.Cost = total, total
		return b
	}
	// The longest live entry this request extends: with breakpoints an
	// entry is a whole prefix up to one; automatic caching matches any
	// common prefix of an earlier prompt (in Granularity blocks, below).
	hit, readBytes := -1, 0
	for i, e := range s.entries {
		n := 0
		switch {
		case !m.Breakpoints:
			n = commonPrefix(e.prefix, r.Bytes)
		case len(e.prefix) <= len(r.Bytes) && bytes.Equal(e.prefix, r.Bytes[:len(e.prefix)]):
			n = len(e.prefix)
		}
		if n > readBytes {
			hit, readBytes = i, n
		}
	}
	if hit >= 0 {
		s.entries[hit].used = at
	}
	b.Read = m.Cacheable(s.Config.Tokens(readBytes))
	oneHour := r.OneHour && m.CacheWrite1h > 0
	ttl := m.TTL
	if oneHour {
		ttl = m.TTL1h
	}
	if m.Breakpoints {
		last := r.Breakpoints[len(r.Breakpoints)-1]
		b.Written = max(0, s.Config.Tokens(last)-b.Read)
		b.Plain = total - b.Read - b.Written
		for _, bp := range r.Breakpoints {
			if s.Config.Tokens(bp) >= float64(m.MinPrefix) {
				s.add(r.Bytes[:bp], at, ttl)
			}
		}
	} else {
		b.Written = total - b.Read
		if total >= float64(m.MinPrefix) {
			s.add(r.Bytes, at, ttl)
		}
	}
	written1h := 0.0
	if oneHour {
		written1h = b.Written
	}
	b.Cost = m.Charge(b.Read, b.Written, written1h, b.Plain)
	return b
}

func (s *Simulator) add(prefix []byte, at time.Time, ttl time.Duration) {
	for i, e := range s.entries {
		if bytes.Equal(e.prefix, prefix) {
			s.entries[i].used = at
			return
		}
	}
	if len(s.entries) == maxEntries {
		// Evict the least recently used entry, not the oldest: a prefix
		// every request reads (the tools and system) stays.
		lru := 0
		for i, e := range s.entries {
			if e.used.Before(s.entries[lru].used) {
				lru = i
			}
		}
		s.entries = append(s.entries[:lru], s.entries[lru+1:]...)
	}
	s.entries = append(s.entries, entry{prefix: prefix, used: at, ttl: ttl})
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
