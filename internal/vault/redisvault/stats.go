package redisvault

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// statsEvery is how long Stats reuses the fleet-wide sizes it last read:
// a scrape, the savings page and the stats API may all ask, and counting
// artifacts costs one command per tenant.
const statsEvery = 5 * time.Second

// statsTimeout bounds one read of the fleet-wide sizes (a scrape waits on
// it), below OpTimeout when that is longer.
const statsTimeout = time.Second

// counters are this store's activity since Open, the counters of
// vault.Stats. They are per replica: a fleet's total is their sum.
type counters struct {
	written  atomic.Uint64 // artifacts this store wrote
	verified atomic.Uint64 // artifacts Persist found already stored
	evicted  atomic.Uint64 // artifacts this store's eviction removed
}

// sizes caches the fleet-wide sizes Stats reports.
type sizes struct {
	mu        sync.Mutex
	at        time.Time // when artifacts and bytes were read; zero: never
	artifacts int64
	bytes     int64
}

// Stats returns the vault's size and activity in the shape of the Badger
// store's, so the gateway's vault metrics and savings page work on a fleet.
// Artifacts and Bytes are the fleet's (every replica on the server and
// prefix reports the same figures: aggregate them with max, not sum), read
// from Redis at most every statsEvery and bounded by statsTimeout; when
// the server cannot be read they are the last figures read (zero before
// any). Bytes is what counts against MaxBytes (artifact text and raw
// bytes; lineage expires by TTL and is not counted). Written, Verified and
// Evicted are this replica's since Open (sum them over the fleet). Corrupt
// stays zero: an unreadable artifact is reported as an error on read, not
// dropped. LSMBytes and VlogBytes are Badger's and stay zero.
func (s *Store) Stats() vault.Stats {
	st := vault.Stats{
		MaxBytes: s.lim().maxBytes,
		Written:  s.counts.written.Load(),
		Verified: s.counts.verified.Load(),
		Evicted:  s.counts.evicted.Load(),
	}
	st.Artifacts, st.Bytes = s.fleetSizes()
	return st
}

// fleetSizes returns the cached fleet-wide artifact count and bytes,
// re-reading them when older than statsEvery.
func (s *Store) fleetSizes() (artifacts, bytes int64) {
	c := &s.sizes
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.at.IsZero() || now.Sub(c.at) >= statsEvery {
		if a, b, err := s.readSizes(context.Background()); err == nil {
			c.artifacts, c.bytes, c.at = a, b, now
		} else {
			s.log.Debug("redis vault sizes not read; reporting the last ones", zap.Error(err))
		}
	}
	return c.artifacts, c.bytes
}

// readSizes counts the fleet's artifacts (one HLEN of metadata per tenant
// with artifacts) and reads its capacity counter.
func (s *Store) readSizes(ctx context.Context) (artifacts, bytes int64, err error) {
	ctx, done, err := s.callWithin(ctx, min(s.lim().opTimeout, statsTimeout))
	if err != nil {
		return 0, 0, err
	}
	defer done()
	tags, err := s.rdb.SMembers(ctx, s.k.global("tenants")).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("redisvault: stats: %w", err)
	}
	var global *redis.StringCmd
	lens := make([]*redis.IntCmd, len(tags))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		global = p.Get(ctx, s.k.global("bytes"))
		for i, tag := range tags {
			lens[i] = p.HLen(ctx, s.k.tagged(tag).meta)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, fmt.Errorf("redisvault: stats: %w", err)
	}
	for _, l := range lens {
		artifacts += l.Val()
	}
	bytes, _ = global.Int64() // absent: nothing stored yet
	return artifacts, max(bytes, 0), nil
}
