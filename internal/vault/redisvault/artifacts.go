package redisvault

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/seal"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// Persist makes arts durable for scope.Tenant before their receipts go out:
// artifacts already stored are confirmed (their last-seen time bumped when
// stale); new ones are written in one script under the fleet's cap and the
// tenant's quota, acknowledged by WAIT when MinReplicas is set, and read back
// byte for byte.
func (s *Store) Persist(ctx context.Context, scope artifact.Scope, arts []artifact.Artifact) error {
	if len(arts) == 0 {
		return nil
	}
	ctx, done, err := s.call(ctx)
	if err != nil {
		return err
	}
	defer done()
	uniq, err := vault.Unique(arts, s.maxArt)
	if err != nil {
		return err
	}
	tk := s.k.tenant(scope.Tenant)
	now := s.nowMS()
	present, err := s.touch(ctx, tk, uniq, now)
	if err != nil {
		return err
	}
	var missing []*artifact.Artifact
	for i, a := range uniq {
		if !present[i] {
			missing = append(missing, a)
		}
	}
	s.counts.verified.Add(uint64(len(uniq) - len(missing)))
	if len(missing) == 0 {
		return nil
	}
	// Only what is written needs the digest check (EncodeAll): an artifact
	// stored under its digest was checked when it was written.
	k := seal.FromContext(ctx)
	enc, err := vault.EncodeAllFor(k, missing)
	if err != nil {
		return err
	}
	if k != nil { // encryption at rest (vault/sealed.go)
		for i, a := range missing {
			enc[i] = vault.SealContent(k, scope.Tenant, a.Digest, enc[i])
		}
	}
	return s.write(ctx, tk, missing, enc, now)
}

// Missing returns the digests tenant has no artifact for; the others are
// confirmed and their last-seen time is bumped when stale, atomically, so
// eviction cannot take them while their receipts are in flight.
func (s *Store) Missing(ctx context.Context, scope artifact.Scope, digests []artifact.Digest) ([]artifact.Digest, error) {
	if len(digests) == 0 {
		return nil, nil
	}
	ctx, done, err := s.call(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	probe := make([]*artifact.Artifact, len(digests))
	for i, d := range digests {
		probe[i] = &artifact.Artifact{Digest: d}
	}
	present, err := s.touch(ctx, s.k.tenant(scope.Tenant), probe, s.nowMS())
	if err != nil {
		return nil, err
	}
	var out []artifact.Digest
	for i, d := range digests {
		if !present[i] {
			out = append(out, d)
		}
	}
	return out, nil
}

// Get returns tenant's artifact d exactly as stored. It is not a sighting.
func (s *Store) Get(ctx context.Context, tenant string, d artifact.Digest) (artifact.Artifact, bool, error) {
	ctx, done, err := s.call(ctx)
	if err != nil {
		return artifact.Artifact{}, false, err
	}
	defer done()
	tk := s.k.tenant(tenant)
	h := hexOf(d)
	var content *redis.StringCmd
	var meta *redis.StringCmd
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		content = p.Get(ctx, tk.artifact(h))
		meta = p.HGet(ctx, tk.meta, h)
		return nil
	})
	if errors.Is(err, redis.Nil) {
		return artifact.Artifact{}, false, nil
	}
	if err != nil {
		return artifact.Artifact{}, false, fmt.Errorf("redisvault: get: %w", err)
	}
	a := artifact.Artifact{Digest: d}
	b, _ := content.Bytes()
	sealed := vault.IsSealed(b)
	b, err = vault.OpenContent(seal.FromContext(ctx), tenant, d, b)
	if err == nil {
		err = vault.DecodeContent(b, &a)
	}
	if err != nil {
		s.log.Warn("redis vault artifact unreadable", zap.String("artifact", fmt.Sprintf("%x", d[:8])), zap.Error(err))
		return artifact.Artifact{}, false, fmt.Errorf("redisvault: get %x: %w", d[:8], err)
	}
	if _, a.Chars, err = parseMeta(meta.Val()); err != nil {
		return artifact.Artifact{}, false, fmt.Errorf("redisvault: get %x: %w", d[:8], err)
	}
	if !vault.NamesStoredFor(seal.FromContext(ctx), sealed, d, vault.StringBytes(a.Text), a.Raw) {
		return artifact.Artifact{}, false, fmt.Errorf("%w: stored artifact %x", vault.ErrDigest, d[:8])
	}
	return a, true, nil
}

// parseMeta reads "<size> <chars>[ <created>]".
func parseMeta(m string) (size int64, chars int, err error) {
	size, chars, _, err = parseMetaCreated(m)
	return size, chars, err
}

// parseMetaCreated reads "<size> <chars>[ <created unix ms>]"; created is
// -1 for a record written before creation times were kept (Search then
// orders it by its last-seen time).
func parseMetaCreated(m string) (size int64, chars int, created int64, err error) {
	a, rest, ok := strings.Cut(m, " ")
	b, c, hasCreated := strings.Cut(rest, " ")
	size, err1 := strconv.ParseInt(a, 10, 64)
	n, err2 := strconv.Atoi(b)
	created = -1
	var err3 error
	if hasCreated {
		created, err3 = strconv.ParseInt(c, 10, 64)
	}
	if !ok || err1 != nil || err2 != nil || err3 != nil || size < 0 || n < 0 {
		return 0, 0, 0, errors.New("corrupt metadata")
	}
	return size, n, created, nil
}

// touch reports which of arts tenant has, bumping stale last-seen times.
func (s *Store) touch(ctx context.Context, tk tenantKeys, arts []*artifact.Artifact, now int64) ([]bool, error) {
	ks := make([]string, 1, 1+len(arts))
	ks[0] = tk.seen
	args := make([]any, 2, 2+len(arts))
	args[0], args[1] = now, s.touchAfter.Milliseconds()
	for _, a := range arts {
		h := hexOf(a.Digest)
		ks = append(ks, tk.artifact(h))
		args = append(args, h)
	}
	var res []int64
	var err error
	if s.lim().minRepl == 0 {
		res, err = touchScript.Run(ctx, s.rdb, ks, args...).Int64Slice()
	} else {
		res, err = s.touchReplicated(ctx, tk, ks, args)
	}
	if err != nil {
		return nil, fmt.Errorf("redisvault: verify: %w", err)
	}
	if len(res) != len(arts) {
		return nil, fmt.Errorf("redisvault: verify: %d answers for %d artifacts", len(res), len(arts))
	}
	present := make([]bool, len(arts))
	for i, v := range res {
		present[i] = v == 1
	}
	return present, nil
}

// touchReplicated confirms with MinReplicas set: an artifact found present
// may be one whose own write was never acknowledged by enough replicas (its
// WAIT timed out and the request passed through), so a confirmation must be
// acknowledged too. The touch always writes the last-seen times (touchAfter
// 0), and WAIT on the same connection then covers that write and, since a
// master replicates one ordered stream, every earlier one: the artifact's
// own write included.
func (s *Store) touchReplicated(ctx context.Context, tk tenantKeys, ks []string, args []any) ([]int64, error) {
	args[1] = int64(0)
	node, err := s.node(ctx, tk.seen)
	if err != nil {
		return nil, err
	}
	var tc, wait *redis.Cmd
	if _, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
		tc = touchScript.Eval(ctx, p, ks, args...)
		wait = s.queueWait(ctx, p)
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	res, err := tc.Int64Slice()
	if err != nil {
		return nil, err
	}
	for _, v := range res {
		if v == 1 {
			// Something is confirmed: it counts only once replicated.
			if err := s.checkWait(wait); err != nil {
				return nil, err
			}
			break
		}
	}
	return res, nil
}

// write stores arts (absent at verify time; enc[i] is the stored form of
// arts[i]) within the fleet's cap and the tenant's quota, waits for replicas
// when configured, and reads them back.
func (s *Store) write(ctx context.Context, tk tenantKeys, arts []*artifact.Artifact, enc [][]byte, now int64) error {
	var need int64
	for _, a := range arts {
		need += vault.ArtifactSize(a)
	}
	if need > s.lim().tenantMax {
		return fmt.Errorf("%w: need %d bytes, tenant quota %d", artifact.ErrFull, need, s.lim().tenantMax)
	}
	if err := s.reserve(ctx, tk, need); err != nil {
		return err
	}
	// giveBack returns what was reserved but not stored, plus what the
	// tenant's own eviction freed. If it fails the fleet counter is high
	// until the next eviction scan recounts it.
	giveBack := need
	defer func() {
		if giveBack == 0 {
			return
		}
		if err := s.rdb.DecrBy(ctx, s.k.global("bytes"), giveBack).Err(); err != nil {
			s.log.Warn("redis vault capacity counter not updated; recounted at the next eviction scan",
				zap.Int64("bytes", giveBack), zap.Error(err))
		}
	}()

	ks := make([]string, 3, 3+len(arts))
	ks[0], ks[1], ks[2] = tk.seen, tk.meta, tk.bytes
	args := make([]any, 5, 5+4*len(arts))
	args[0], args[1], args[2], args[3], args[4] = now, s.cutoff(now), s.lim().tenantMax, s.lim().tenantMax/20, tk.content
	for i, a := range arts {
		h := hexOf(a.Digest)
		ks = append(ks, tk.artifact(h))
		args = append(args, h, vault.ArtifactSize(a), a.Chars, enc[i])
	}
	node, err := s.node(ctx, tk.seen)
	if err != nil {
		return err
	}
	var wr, wait *redis.Cmd
	_, err = node.Pipelined(ctx, func(p redis.Pipeliner) error {
		wr = writeScript.Eval(ctx, p, ks, args...)
		wait = s.queueWait(ctx, p)
		return nil
	})
	res, rerr := wr.Int64Slice()
	if rerr != nil || len(res) != 3+len(arts) && !(len(res) == 3 && res[0] == -1) {
		return fmt.Errorf("redisvault: write: %w", errors.Join(rerr, err))
	}
	giveBack += res[1] // freed by the tenant's own eviction
	s.counts.evicted.Add(uint64(max(res[2], 0)))
	if res[2] > 0 {
		s.log.Info("redis vault evicted within tenant quota", zap.Int64("artifacts", res[2]), zap.Int64("bytes", res[1]))
	}
	if res[0] == -1 {
		return fmt.Errorf("%w: tenant quota of %d bytes reached (need %d)", artifact.ErrFull, s.lim().tenantMax, need)
	}
	giveBack -= res[0]
	if err := s.checkWait(wait); err != nil {
		return err
	}
	if err != nil {
		return fmt.Errorf("redisvault: write: %w", err)
	}
	if err := s.readBack(ctx, tk, arts, enc, res[3:]); err != nil {
		return err
	}
	for _, v := range res[3:] {
		if v == 1 {
			s.counts.written.Add(1) // stored by this call, not by a concurrent writer
		}
	}
	return nil
}

// readBack compares what this call wrote byte for byte with its stored form
// (enc), and checks that artifacts a concurrent writer stored first exist
// (that writer compares their content). The encoding is deterministic and
// round-trips (vault's codec tests), so bytes equal to the encoding read
// back as the artifact; comparing them spares decompressing all of it.
func (s *Store) readBack(ctx context.Context, tk tenantKeys, arts []*artifact.Artifact, enc [][]byte, ours []int64) error {
	ks := make([]string, len(arts))
	for i, a := range arts {
		ks[i] = tk.artifact(hexOf(a.Digest))
	}
	vals, err := s.rdb.MGet(ctx, ks...).Result()
	if err != nil {
		return fmt.Errorf("redisvault: read back: %w", err)
	}
	for i, a := range arts {
		v, ok := vals[i].(string)
		if !ok {
			return fmt.Errorf("%w: artifact %x not found", vault.ErrReadBack, a.Digest[:8])
		}
		if ours[i] == 1 && v != string(enc[i]) {
			return fmt.Errorf("%w: artifact %x", vault.ErrReadBack, a.Digest[:8])
		}
	}
	return nil
}

// cutoff is the last-seen time (unix ms) before which an artifact is
// outside the retention window.
func (s *Store) cutoff(now int64) int64 { return now - s.retention.Milliseconds() }

// reserve claims n bytes under the fleet's cap, evicting once if they do
// not fit.
func (s *Store) reserve(ctx context.Context, tk tenantKeys, n int64) error {
	if n > s.lim().maxBytes {
		return fmt.Errorf("%w: need %d bytes, cap %d", artifact.ErrFull, n, s.lim().maxBytes)
	}
	ok, used, err := s.tryReserve(ctx, tk, n)
	if err != nil || ok {
		return err
	}
	if err := s.evict(ctx, n); err != nil {
		return err
	}
	if ok, used, err = s.tryReserve(ctx, tk, n); err != nil || ok {
		return err
	}
	return fmt.Errorf("%w: need %d bytes, %d of %d in use", artifact.ErrFull, n, used, s.lim().maxBytes)
}

func (s *Store) tryReserve(ctx context.Context, tk tenantKeys, n int64) (bool, int64, error) {
	res, err := reserveScript.Run(ctx, s.rdb, []string{s.k.global("bytes"), s.k.global("tenants")}, n, s.lim().maxBytes, tk.tag).Int64Slice()
	if err == nil && len(res) != 2 {
		err = errors.New("bad reply")
	}
	if err != nil {
		return false, 0, fmt.Errorf("redisvault: reserve: %w", err)
	}
	return res[0] == 1, res[1], nil
}

// scanLimit bounds the candidates read per tenant in one eviction scan.
const scanLimit = 512

// evict frees room for need more bytes across the fleet: artifacts outside
// the retention window, least recently seen first, down to the cap minus
// need minus 5% slack (so a nearly full vault does not evict on every
// request). It also recounts the fleet counter from the tenants' own
// counters, which heals a give-back lost to an outage.
func (s *Store) evict(ctx context.Context, need int64) error {
	s.evictMu.Lock()
	defer s.evictMu.Unlock()
	now := s.nowMS()
	if now < s.nextEvict.Load() {
		return nil // nothing can have left its retention window since the last scan
	}
	cutoff := s.cutoff(now)
	cands, used, oldestKept, err := s.evictScan(ctx, cutoff)
	if err != nil {
		return err
	}
	target := s.lim().maxBytes - need - s.lim().maxBytes/20
	if used <= target {
		return nil
	}
	slices.SortFunc(cands, func(a, b evictCand) int { return cmp.Compare(a.seen, b.seen) })
	byTenant, err := s.evictSelect(ctx, cands, used-target, cutoff)
	if err != nil {
		return err
	}
	freed := s.evictRun(ctx, byTenant)
	if used-freed > target && oldestKept >= 0 && len(cands) < scanLimit {
		// Every artifact left is inside its window; the earliest can
		// leave it at oldestKept+retention, and last-seen times only grow.
		s.nextEvict.Store(int64(oldestKept) + s.retention.Milliseconds())
	}
	return nil
}

// evictCand is an artifact eviction may remove: its tenant's keys, its
// digest's hex and when it was last seen.
type evictCand struct {
	tk   tenantKeys
	hex  string
	seen float64
}

// evictScan reads every tenant's artifacts last seen before cutoff (at
// most scanLimit a tenant), the bytes the tenants hold, and the earliest
// last-seen time of the artifacts kept (-1 when none). A fleet counter
// that disagrees with the tenants' is recounted.
func (s *Store) evictScan(ctx context.Context, cutoff int64) (cands []evictCand, used int64, oldestKept float64, err error) {
	tags, err := s.rdb.SMembers(ctx, s.k.global("tenants")).Result()
	if err != nil {
		return nil, 0, 0, fmt.Errorf("redisvault: evict: %w", err)
	}
	type scan struct {
		tk          tenantKeys
		bytes       *redis.StringCmd
		old, oldest *redis.ZSliceCmd
	}
	scans := make([]scan, len(tags))
	var global *redis.StringCmd
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		global = p.Get(ctx, s.k.global("bytes"))
		for i, tag := range tags {
			tk := s.k.tagged(tag)
			scans[i] = scan{tk: tk, bytes: p.Get(ctx, tk.bytes),
				old:    p.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: tk.seen, Start: "-inf", Stop: "(" + strconv.FormatInt(cutoff, 10), ByScore: true, Count: scanLimit}),
				oldest: p.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: tk.seen, Start: cutoff, Stop: "+inf", ByScore: true, Count: 1})}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, 0, 0, fmt.Errorf("redisvault: evict: %w", err)
	}
	oldestKept = -1
	for _, sc := range scans {
		b, _ := sc.bytes.Int64()
		used += b
		for _, z := range sc.old.Val() {
			cands = append(cands, evictCand{sc.tk, z.Member.(string), z.Score})
		}
		if kept := sc.oldest.Val(); len(kept) > 0 && (oldestKept < 0 || kept[0].Score < oldestKept) {
			oldestKept = kept[0].Score
		}
	}
	if observed, _ := global.Int64(); observed != used {
		// Only if unchanged since read: a reservation made meanwhile wins.
		if err := recountScript.Run(ctx, s.rdb, []string{s.k.global("bytes")}, observed, used).Err(); err != nil {
			return nil, 0, 0, fmt.Errorf("redisvault: recount: %w", err)
		}
		s.log.Info("redis vault capacity recounted", zap.Int64("was", observed), zap.Int64("bytes", used))
	}
	return cands, used, oldestKept, nil
}

// evictSelect takes just enough of the oldest of cands (sorted by
// last-seen time) to free excess bytes, grouped by tenant as the evict
// script's arguments.
func (s *Store) evictSelect(ctx context.Context, cands []evictCand, excess, cutoff int64) (map[string][]any, error) {
	sizes := make([]*redis.StringCmd, len(cands))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range cands {
			sizes[i] = p.HGet(ctx, c.tk.meta, c.hex)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redisvault: evict: %w", err)
	}
	byTenant := map[string][]any{}
	var want int64
	for i := 0; i < len(cands) && want < excess; i++ {
		size, _, err := parseMeta(sizes[i].Val())
		if err != nil {
			continue // evicted meanwhile
		}
		c := cands[i]
		if byTenant[c.tk.tag] == nil {
			byTenant[c.tk.tag] = []any{cutoff, c.tk.content}
		}
		byTenant[c.tk.tag] = append(byTenant[c.tk.tag], c.hex)
		want += size
	}
	return byTenant, nil
}

// evictRun runs the evict script for each tenant of byTenant and takes what
// it freed off the fleet counter; it returns the bytes freed.
func (s *Store) evictRun(ctx context.Context, byTenant map[string][]any) int64 {
	var freed, n int64
	for tag, args := range byTenant {
		tk := s.k.tagged(tag)
		res, err := evictScript.Run(ctx, s.rdb, []string{tk.seen, tk.meta, tk.bytes}, args...).Int64Slice()
		if err != nil || len(res) != 2 {
			s.log.Warn("redis vault eviction failed", zap.Error(err))
			break
		}
		freed += res[0]
		n += res[1]
		s.counts.evicted.Add(uint64(max(res[1], 0)))
	}
	if freed > 0 {
		if err := s.rdb.DecrBy(ctx, s.k.global("bytes"), freed).Err(); err != nil {
			s.log.Warn("redis vault capacity counter not updated; recounted at the next eviction scan", zap.Error(err))
		}
		s.log.Info("redis vault evicted", zap.Int64("artifacts", n), zap.Int64("bytes", freed))
	}
	return freed
}
