package badgervault

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/seal"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

const (
	// writeChunk bounds the artifacts per write transaction so a request never
	// hits Badger's batch limit (15% of a memtable); values above 1 KiB cost
	// only a pointer there. One chunk covers any realistic request.
	writeChunk = 256
	// evictChunk bounds deletions per eviction transaction.
	evictChunk = 128
)

// Persist makes arts durable for scope.Tenant before their receipts go out.
// New artifacts are written in one transaction, synced once and read back;
// artifacts already stored are checked present and, once per process,
// readable (their last-seen time is bumped when stale, which keeps them
// inside the retention window); an unreadable one is dropped and written
// again.
func (s *Store) Persist(ctx context.Context, scope artifact.Scope, arts []artifact.Artifact) error {
	if len(arts) == 0 {
		return nil
	}
	release, err := s.enter()
	if err != nil {
		return err
	}
	defer release()
	uniq, err := vault.Unique(arts, s.maxArt)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now().UnixNano()
	missing, err := s.verify(ctx, scope.Tenant, uniq, now)
	if err != nil {
		return err
	}
	s.verified.Add(uint64(len(uniq) - len(missing)))
	if len(missing) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.write(ctx, scope.Tenant, missing, now)
}

// Missing returns the digests tenant has no readable artifact for. The
// others are confirmed present (and, the first time in this process, read
// and checked) and their last-seen time is bumped when stale, in the same
// transaction, so eviction cannot take them while their receipts are in
// flight. A record that does not read back intact is dropped and reported
// missing, so the caller stores it again.
func (s *Store) Missing(ctx context.Context, scope artifact.Scope, digests []artifact.Digest) ([]artifact.Digest, error) {
	if len(digests) == 0 {
		return nil, nil
	}
	release, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer release()
	probe := make([]*artifact.Artifact, len(digests))
	for i, d := range digests {
		probe[i] = &artifact.Artifact{Digest: d}
	}
	missing, err := s.verify(ctx, scope.Tenant, probe, s.now().UnixNano())
	if err != nil {
		return nil, err
	}
	s.verified.Add(uint64(len(digests) - len(missing)))
	out := make([]artifact.Digest, len(missing))
	for i, a := range missing {
		out[i] = a.Digest
	}
	return out, nil
}

// verify returns the artifacts not stored (readable) for tenant. Present ones
// are checked against their metadata, and their last-seen time is bumped in
// the same transaction when older than touchAfter, so a concurrent eviction
// either sees the bump or makes this transaction retry and find them
// missing. Content this process has not yet read intact is read and checked
// (see integrity.go); a record that fails is dropped in the same
// transaction and counts as missing.
func (s *Store) verify(ctx context.Context, tenant string, arts []*artifact.Artifact, now int64) ([]*artifact.Artifact, error) {
	for attempt := 0; ; attempt++ {
		// The generation is read before the transaction (a deletion
		// committing after this bumps it), and no deletion runs while the
		// set vouches.
		s.deletes.RLock()
		gen := s.deleteGen
		rest := s.checked.unvouched(tenant, arts, now, int64(s.touchAfter), gen)
		s.deletes.RUnlock()
		if len(rest) == 0 {
			return nil, nil
		}
		missing, _, err := s.verifyRead(ctx, tenant, rest, now, gen, false)
		if errors.Is(err, errNeedsDrop) {
			// A record failed its read: drop it alone among deletions, so
			// no concurrent request is vouched for it (integrity.go).
			err = s.deleting(func() (bool, error) {
				var dropped bool
				missing, dropped, err = s.verifyRead(ctx, tenant, rest, now, gen, true)
				return dropped, err
			})
		}
		if errors.Is(err, errMoved) && attempt < maxRetries {
			continue // what it found may be gone: look again
		}
		return missing, err
	}
}

// errMoved: verifyRead waited for another write's sync and a deletion
// committed meanwhile (that write's failure drops its records), so what it
// found present may be gone.
var errMoved = errors.New("vault: a deletion committed while a sync was awaited")

// errNeedsDrop stops a verify transaction that found a record to drop
// outside deleting.
var errNeedsDrop = errors.New("vault: a record needs dropping")

// verifyRead is verify's transaction over the artifacts not vouched for.
// With drop false it stops at the first unreadable record (errNeedsDrop).
func (s *Store) verifyRead(ctx context.Context, tenant string, arts []*artifact.Artifact, now int64, gen uint64, drop bool) (missing []*artifact.Artifact, dropped bool, err error) {
	var fresh, known []seenDigest
	type dropRec struct {
		d    artifact.Digest
		size int64
		why  error
	}
	var drops []dropRec
	err = s.update(ctx, func(txn *badger.Txn) error {
		missing, fresh, known, drops = missing[:0], fresh[:0], known[:0], drops[:0]
		for _, a := range arts {
			seen, ok, err := s.touch(txn, tenant, a.Digest, now)
			if err != nil {
				return err
			}
			if !ok {
				missing = append(missing, a)
				continue
			}
			if s.checked.has(tenant, a.Digest) {
				// Read intact before; metadata and content are written and
				// deleted together, so the key lookup is enough now.
				if _, err := txn.Get(vault.ArtKey(tenant, a.Digest)); err != nil {
					return fmt.Errorf("vault: artifact %x content: %w", a.Digest[:8], err)
				}
				known = append(known, seenDigest{a.Digest, seen})
				continue
			}
			why := readable(txn, tenant, a.Digest, seal.FromContext(ctx))
			if why == nil {
				fresh = append(fresh, seenDigest{a.Digest, seen})
				continue
			}
			if !drop {
				return errNeedsDrop
			}
			size, err := dropRecord(txn, tenant, a.Digest)
			if err != nil {
				return err
			}
			drops = append(drops, dropRec{a.Digest, size, why})
			missing = append(missing, a)
		}
		return nil
	})
	if errors.Is(err, errNeedsDrop) {
		return nil, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("vault: verify: %w", err)
	}
	for _, d := range drops {
		s.dropped(tenant, d.d, d.size, d.why)
	}
	// A record another Persist committed but has not yet synced is not
	// durable: share a sync before confirming it.
	if s.unsynced.any(tenant, fresh, known) {
		if err := s.syncs.sync(s.syncDB); err != nil {
			return nil, len(drops) > 0, fmt.Errorf("vault: sync: %w", noSpaceIsFull(err))
		}
		var cur uint64
		if drop {
			cur = s.deleteGen // this runs inside deleting, which holds deletes
		} else {
			cur = s.deletionGen()
		}
		if cur != gen {
			return nil, len(drops) > 0, errMoved
		}
	}
	s.checked.add(tenant, gen, fresh...)
	s.checked.seen(tenant, gen, known)
	return missing, len(drops) > 0, nil
}

// touch reports whether tenant has artifact d and bumps its last-seen time
// when stale; seen is the last-seen time stored once it returns.
func (s *Store) touch(txn *badger.Txn, tenant string, d artifact.Digest, now int64) (seen int64, ok bool, err error) {
	mk := vault.MetaKey(tenant, d)
	item, err := txn.Get(mk)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	var m vault.Meta
	if err := item.Value(m.Decode); err != nil {
		return 0, false, err
	}
	if m.Digest != d {
		return 0, false, fmt.Errorf("%w: record filed under %x", vault.ErrDigest, d[:8])
	}
	if now-m.LastSeen < int64(s.touchAfter) {
		return m.LastSeen, true, nil
	}
	m.LastSeen = now
	return now, true, txn.Set(mk, m.Encode())
}

// write stores arts (not present at verify time) within the byte cap, syncs
// once and reads everything back.
func (s *Store) write(ctx context.Context, tenant string, arts []*artifact.Artifact, now int64) error {
	gen := s.deletionGen() // before the records exist (see verifiedSet)
	var need int64
	for _, a := range arts {
		need += vault.ArtifactSize(a)
	}
	// Content is at most its plain size once compressed; keys, metadata
	// and Badger's entry headers add well under 1 KiB per artifact.
	if err := s.disk.check(need + int64(len(arts))<<10); err != nil {
		return err
	}
	if err := s.reserve(tenant, need); err != nil {
		return err
	}
	reserved := need
	defer func() { // give back what was not stored
		s.bytes.Add(-reserved)
		s.tenants.add(tenant, -reserved)
	}()

	// Content is checked and encoded (compressed) before the transactions,
	// on every core, so a retried transaction does not encode again.
	k := seal.FromContext(ctx)
	enc, err := vault.EncodeAllFor(k, arts)
	if err != nil {
		return err
	}
	if k != nil { // encryption at rest (sealed.go)
		for i, a := range arts {
			enc[i] = vault.SealContent(k, tenant, a.Digest, enc[i])
		}
	}
	// ours lists artifacts this call wrote; others were stored by a
	// concurrent Persist between verify and write, so only their presence is
	// checked (the other writer compares their content).
	var ours, others []*artifact.Artifact
	var oursEnc [][]byte // the stored bytes of ours
	// Pending from before the records can be found until they are synced
	// and read back (or dropped again): verify does not confirm them sooner.
	s.unsynced.add(tenant, arts)
	defer s.unsynced.done(tenant, arts)
	for off := 0; off < len(arts); off += writeChunk {
		end := min(off+writeChunk, len(arts))
		wrote, skipped, wroteEnc, err := s.writeBatch(ctx, tenant, arts[off:end], enc[off:end], now)
		if err != nil {
			s.settleCommitted(tenant, ours)
			return fmt.Errorf("vault: write: %w", err)
		}
		for _, a := range wrote {
			reserved -= vault.ArtifactSize(a)
		}
		s.count.Add(int64(len(wrote)))
		s.written.Add(uint64(len(wrote)))
		ours, oursEnc = append(ours, wrote...), append(oursEnc, wroteEnc...)
		others = append(others, skipped...)
	}
	// Sync even when everything was written concurrently by others: their
	// sync may not have happened yet, and our receipts depend on it.
	// Concurrent writers share one sync (group commit, groupsync.go).
	if err := s.syncs.sync(s.syncDB); err != nil {
		s.dropUnsynced(tenant, arts, ours)
		return fmt.Errorf("vault: sync: %w", noSpaceIsFull(err))
	}
	if err := s.readBack(tenant, ours, oursEnc, others); err != nil {
		s.dropUnsynced(tenant, arts, ours)
		return err
	}
	written := make([]seenDigest, len(ours))
	for i, a := range ours {
		written[i] = seenDigest{a.Digest, now}
	}
	s.checked.add(tenant, gen, written...)
	return nil
}

// writeBatch stores the artifacts of chunk (enc their stored bytes) that
// tenant does not have yet, in one transaction: it returns those it wrote,
// with their bytes, and those found stored already (skipped).
func (s *Store) writeBatch(ctx context.Context, tenant string, chunk []*artifact.Artifact, enc [][]byte, now int64) (wrote, skipped []*artifact.Artifact, wroteEnc [][]byte, err error) {
	err = s.update(ctx, func(txn *badger.Txn) error {
		wrote, skipped, wroteEnc = wrote[:0], skipped[:0], wroteEnc[:0]
		for i, a := range chunk {
			mk := vault.MetaKey(tenant, a.Digest)
			_, err := txn.Get(mk)
			if err == nil {
				skipped = append(skipped, a)
				continue
			}
			if !errors.Is(err, badger.ErrKeyNotFound) {
				return err
			}
			m := vault.Meta{Digest: a.Digest, Chars: a.Chars, TextBytes: len(a.Text), RawBytes: len(a.Raw), Created: now, LastSeen: now}
			if err := txn.Set(vault.ArtKey(tenant, a.Digest), enc[i]); err != nil {
				return err
			}
			if err := txn.Set(mk, m.Encode()); err != nil {
				return err
			}
			wrote, wroteEnc = append(wrote, a), append(wroteEnc, enc[i])
		}
		return nil
	})
	return wrote, skipped, wroteEnc, err
}

// settleCommitted is for a write whose later chunk failed after earlier
// ones committed (ours): their records stand, correct but not yet synced,
// and a concurrent request may confirm them once their pending mark goes.
// So they are synced before it goes; if that fails too they stay pending
// for good, and verify syncs before it confirms any of them. (Dropping
// them instead could delete records such a request has just confirmed.)
func (s *Store) settleCommitted(tenant string, ours []*artifact.Artifact) {
	if len(ours) == 0 {
		return
	}
	if err := s.syncs.sync(s.syncDB); err != nil {
		s.log.Error("vault could not sync the committed part of a failed write; verify syncs before confirming it", zap.Int("artifacts", len(ours)), zap.Error(err))
		s.unsynced.add(tenant, ours)
	}
}

// dropUnsynced deletes the records this write committed (ours) after its
// sync or read-back failed, so no later request confirms content that may
// not be durable. When the drop fails too, arts stay pending for good:
// verify then syncs before it confirms any of them.
func (s *Store) dropUnsynced(tenant string, arts, ours []*artifact.Artifact) {
	var sizes []int64
	err := s.deleting(func() (bool, error) {
		err := s.update(context.Background(), func(txn *badger.Txn) error {
			sizes = sizes[:0]
			for _, a := range ours {
				size, err := dropRecord(txn, tenant, a.Digest)
				if err != nil {
					return err
				}
				sizes = append(sizes, size)
			}
			return nil
		})
		return err == nil && len(ours) > 0, err
	})
	if err != nil {
		s.log.Error("vault could not drop records whose write did not complete; verify syncs before confirming them", zap.Int("artifacts", len(ours)), zap.Error(err))
		s.unsynced.add(tenant, arts)
		return
	}
	for i, a := range ours {
		s.forget(tenant, a.Digest, sizes[i])
	}
}

// readBack is the "verified readable" half of invariant 4 for what this
// call wrote; it runs after the sync returned. For each of ours it looks the
// content key up in a new read transaction, through the same path every
// later read takes (memtable or table index, then the value pointer into the
// value log), and compares the value's bytes with enc[i], the bytes handed
// to Badger. That shows the write was applied and indexed under the right
// key, and that the value log holds exactly the encoded record where the
// index points. It is enough because:
//   - the sync that returned before covered those same pages (the current
//     memtable's log, any memtable log still waiting for its flush, and the
//     value log; syncDB), and a failed sync is an error, never ignored, so
//     the bytes compared are the bytes made durable;
//   - the encoding is deterministic and reads back as the artifact
//     (TestCodec, TestContentV3, FuzzContentRoundTrip,
//     TestEncodeAllMatchesEncodeContent), so bytes equal to enc[i] decode to
//     it: decompressing them again would test the codec, not the store.
//
// The comparison reads the page cache through Badger's memory map, without
// a copy; it does not re-read the device. Damage after the write (a bad
// sector, a file changed by hand) is caught by the first read of the
// record in a later process and by the scrub (integrity.go). Artifacts a
// concurrent Persist wrote between verify and write (others) are only
// checked present: that writer compares their bytes.
func (s *Store) readBack(tenant string, ours []*artifact.Artifact, enc [][]byte, others []*artifact.Artifact) error {
	return s.db.View(func(txn *badger.Txn) error {
		for _, a := range others {
			if _, err := txn.Get(vault.ArtKey(tenant, a.Digest)); err != nil {
				return fmt.Errorf("vault: read back %x: %w", a.Digest[:8], err)
			}
		}
		for i, a := range ours {
			item, err := txn.Get(vault.ArtKey(tenant, a.Digest))
			if err != nil {
				return fmt.Errorf("vault: read back %x: %w", a.Digest[:8], err)
			}
			same := false
			if err := item.Value(func(v []byte) error { same = bytes.Equal(v, enc[i]); return nil }); err != nil {
				return fmt.Errorf("vault: read back %x: %w", a.Digest[:8], err)
			}
			if !same {
				return fmt.Errorf("%w: artifact %x", vault.ErrReadBack, a.Digest[:8])
			}
		}
		return nil
	})
}

// reserve claims n bytes of tenant's quota and of the cap, evicting the
// tenant's own expired artifacts first when its quota is reached. Other
// tenants' artifacts are only evicted for the cap, never for a quota.
func (s *Store) reserve(tenant string, n int64) error {
	quota := s.maxTenant.Load()
	if !s.tenants.tryReserve(tenant, n, quota) {
		if n > quota {
			return fmt.Errorf("%w: need %d bytes, tenant quota %d", vault.ErrFull, n, quota)
		}
		s.evictTenant(tenant, n)
		if !s.tenants.tryReserve(tenant, n, quota) {
			return fmt.Errorf("%w: tenant quota: need %d bytes, %d of %d in use", vault.ErrFull, n, s.tenants.used(tenant), quota)
		}
	}
	if err := s.reserveCap(n); err != nil {
		s.tenants.add(tenant, -n)
		return err
	}
	return nil
}

// reserveCap claims n bytes under the cap, evicting once if they do not fit.
func (s *Store) reserveCap(n int64) error {
	if s.tryReserve(n) {
		return nil
	}
	capacity := s.maxBytes.Load()
	if n > capacity {
		return fmt.Errorf("%w: need %d bytes, cap %d", vault.ErrFull, n, capacity)
	}
	// Free a little more than needed so a nearly full vault does not evict
	// on every request.
	s.evict(n, capacity/20)
	if s.tryReserve(n) {
		return nil
	}
	return fmt.Errorf("%w: need %d bytes, %d of %d in use", vault.ErrFull, n, s.bytes.Load(), capacity)
}

func (s *Store) tryReserve(n int64) bool {
	capacity := s.maxBytes.Load()
	for {
		cur := s.bytes.Load()
		if cur+n > capacity {
			return false
		}
		if s.bytes.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// evictScope is what one eviction works on: the whole vault for the cap, or
// one tenant's artifacts for its quota.
type evictScope struct {
	prefix []byte        // metadata keys scanned
	tenant *string       // only this tenant's keys (a tenant may contain '/')
	used   func() int64  // bytes in use in the scope
	target int64         // evict down to this
	next   *atomic.Int64 // earliest time anything in scope can expire
}

// evict makes room under the cap for need more bytes, with slack to spare.
func (s *Store) evict(need, slack int64) {
	s.evictOldest(evictScope{[]byte("m/"), nil, s.bytes.Load, s.maxBytes.Load() - need - slack, &s.nextEvict})
}

// evictTenant makes room under tenant's quota for need more bytes, from
// tenant's own artifacts only.
func (s *Store) evictTenant(tenant string, need int64) {
	prefix := append([]byte("m/"+tenant), '/')
	used := func() int64 { return s.tenants.used(tenant) }
	quota := s.maxTenant.Load()
	s.evictOldest(evictScope{prefix, &tenant, used, quota - need - quota/20, s.tenants.next(tenant)})
}

// evictOldest deletes artifacts in scope whose last-seen time is outside the
// retention window, least recently seen first, until the scope's usage
// reaches its target. Artifacts seen within Retention are never deleted, so
// a vault (or tenant) full of live artifacts stays full and Persist reports
// ErrFull.
func (s *Store) evictOldest(sc evictScope) {
	s.evictMu.Lock()
	defer s.evictMu.Unlock()
	target := sc.target
	if sc.used() <= target {
		return // a concurrent eviction already made room
	}
	now := s.now().UnixNano()
	if now < sc.next.Load() {
		return // nothing can have left its retention window since the last scan
	}
	cutoff := now - int64(s.retention)
	cands, oldestKept, err := s.evictCandidates(sc, cutoff)
	if err != nil {
		s.log.Warn("vault eviction scan failed", zap.Error(err))
		return
	}
	slices.SortFunc(cands, func(a, b evictCand) int { return cmp.Compare(a.seen, b.seen) })
	// Take just enough of the oldest to reach the target.
	excess := sc.used() - target
	var take int
	for sum := int64(0); take < len(cands) && sum < excess; take++ {
		sum += cands[take].size
	}

	var evicted, freed int64
	for chunk := range slices.Chunk(cands[:take], evictChunk) {
		n, b, err := s.evictChunk(chunk, cutoff)
		if err != nil {
			s.log.Warn("vault eviction failed", zap.Error(err))
			break
		}
		evicted += n
		freed += b
	}
	if evicted > 0 {
		s.log.Info("vault evicted", zap.Int64("artifacts", evicted), zap.Int64("bytes", freed))
	}
	if sc.used() > target && oldestKept != math.MaxInt64 {
		// Every artifact left is inside its window; the earliest can leave
		// it at oldestKept+retention, and last-seen times only grow.
		sc.next.Store(oldestKept + int64(s.retention))
	}
}

// evictCand is an artifact eviction may remove: its metadata key, when it
// was last seen and its size.
type evictCand struct {
	key  []byte
	seen int64
	size int64
}

// evictCandidates scans sc's metadata for the artifacts last seen before
// cutoff, and returns the earliest last-seen time of those it keeps
// (math.MaxInt64 when none).
func (s *Store) evictCandidates(sc evictScope, cutoff int64) ([]evictCand, int64, error) {
	var cands []evictCand
	oldestKept := int64(math.MaxInt64)
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 256, Prefix: sc.prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if sc.tenant != nil && tenantOfKey(it.Item().Key()) != *sc.tenant {
				continue
			}
			var m vault.Meta
			if err := it.Item().Value(m.Decode); err != nil {
				return err
			}
			if m.LastSeen < cutoff {
				cands = append(cands, evictCand{it.Item().KeyCopy(nil), m.LastSeen, m.Size()})
			} else {
				oldestKept = min(oldestKept, m.LastSeen)
			}
		}
		return nil
	})
	return cands, oldestKept, err
}

// evictChunk deletes the candidates of chunk still last seen before cutoff
// (content and metadata) in one transaction, then forgets their
// verification and takes them off the counts. It returns how many
// artifacts and bytes went.
func (s *Store) evictChunk(chunk []evictCand, cutoff int64) (n, b int64, err error) {
	per := map[string]int64{}
	var gone []verifiedKey
	err = s.deleting(func() (bool, error) {
		err := s.update(context.Background(), func(txn *badger.Txn) error {
			n, b = 0, 0
			clear(per)
			gone = gone[:0]
			for _, c := range chunk {
				item, err := txn.Get(c.key)
				if errors.Is(err, badger.ErrKeyNotFound) {
					continue
				}
				if err != nil {
					return err
				}
				var m vault.Meta
				if err := item.Value(m.Decode); err != nil {
					return err
				}
				if m.LastSeen >= cutoff {
					continue // seen again since the scan
				}
				ak := append([]byte("a"), c.key[1:]...)
				if err := txn.Delete(c.key); err != nil {
					return err
				}
				if err := txn.Delete(ak); err != nil {
					return err
				}
				n++
				b += m.Size()
				per[tenantOfKey(c.key)] += m.Size()
				if t, d, ok := keyDigest(c.key); ok {
					gone = append(gone, verifiedKey{t, d})
				}
			}
			return nil
		})
		return err == nil && n > 0, err
	})
	if err != nil {
		return 0, 0, err
	}
	for _, k := range gone {
		s.checked.remove(k.tenant, k.d)
	}
	for t, size := range per {
		s.tenants.add(t, -size)
	}
	s.bytes.Add(-b)
	s.count.Add(-n)
	s.evicted.Add(uint64(n))
	return n, b, nil
}

// Get returns tenant's artifact d, for recovery and tests. It does not count
// as a sighting.
func (s *Store) Get(ctx context.Context, tenant string, d artifact.Digest) (artifact.Artifact, bool, error) {
	release, err := s.enter()
	if err != nil {
		return artifact.Artifact{}, false, err
	}
	defer release()
	if err := ctx.Err(); err != nil {
		return artifact.Artifact{}, false, err
	}
	a := artifact.Artifact{Digest: d}
	found, sealed := false, false
	err = s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(vault.ArtKey(tenant, d))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := item.Value(func(v []byte) error {
			sealed = vault.IsSealed(v)
			plain, err := vault.OpenContent(seal.FromContext(ctx), tenant, d, v)
			if err != nil {
				return err
			}
			return vault.DecodeContent(plain, &a)
		}); err != nil {
			return err
		}
		if item, err = txn.Get(vault.MetaKey(tenant, d)); err != nil {
			return err
		}
		var m vault.Meta
		if err := item.Value(m.Decode); err != nil {
			return err
		}
		a.Chars = m.Chars
		found = true
		return nil
	})
	if err != nil {
		if vault.Unreadable(err) {
			s.log.Warn("vault artifact unreadable", zap.String("artifact", fmt.Sprintf("%x", d[:8])), zap.Error(err))
		}
		return artifact.Artifact{}, false, fmt.Errorf("vault: get: %w", err)
	}
	if !found {
		return artifact.Artifact{}, false, nil
	}
	if !vault.NamesStoredFor(seal.FromContext(ctx), sealed, d, vault.StringBytes(a.Text), a.Raw) {
		return artifact.Artifact{}, false, fmt.Errorf("%w: stored artifact %x", vault.ErrDigest, d[:8])
	}
	return a, true, nil
}
