package badgervault

import (
	"context"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/seal"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// A receipt may only name content that reads back. A record found by key is
// not yet a record that reads: a value log damaged on disk (a torn write, a
// bad sector, a file overwritten by hand) still answers every key lookup.
// So the first time this process confirms an artifact it reads the record
// and checks its CRC and digest; an unreadable record is dropped (content,
// metadata and its bytes in the accounting) and reported missing, so the
// request stores it again. Confirmed digests are remembered, bounded, so a
// warm request costs no reads; a background scrub re-reads everything at a
// bounded rate and drops what has gone bad since.

// maxVerified bounds the digests remembered as read intact (about 100 bytes
// each). Past it the set starts over: forgetting only costs one more read.
const maxVerified = 1 << 16

// defaultScrubRate is the stored content bytes per second the scrub reads:
// a full 512 MiB vault in about two minutes, in small transactions.
const defaultScrubRate = 4 << 20

// defaultScrubEvery spaces full scrub passes. A pass reads the whole value
// log, whose pages then count in the process's RSS (clean, reclaimable)
// until the kernel needs them back; Missing already reads every record once
// per process, so the scrub only has to catch damage that happens later.
const defaultScrubEvery = 6 * time.Hour

// scrubBatch bounds the content one scrub transaction reads.
const scrubBatch = 1 << 20

type verifiedKey struct {
	tenant string
	d      artifact.Digest
}

// verifiedSet holds the artifacts whose records this process read intact,
// with what it last knew of each: the last-seen time stored with it and the
// deletion generation (Store.deleteGen) read before the transaction that
// found it present. While that generation is current no artifact has been
// deleted since, so the record is still there; while its last-seen time is
// within touchAfter, touching it would write nothing and eviction, which
// only takes artifacts unseen for the whole retention window (at least 4×
// touchAfter), cannot take it. Such an artifact is confirmed without a read
// (vouched): a warm request's 50 artifacts cost one map lookup each instead
// of two Badger point reads.
type verifiedSet struct {
	mu  sync.Mutex
	m   map[verifiedKey]verifiedEntry
	max int
}

type verifiedEntry struct {
	seen int64  // last-seen time stored with the record (unix nanoseconds)
	gen  uint64 // Store.deleteGen when it was found present
}

// recent reports whether touching the record at now would write nothing
// (a clock gone backwards is not recent).
func (e verifiedEntry) recent(now, touchAfter int64) bool {
	return now >= e.seen && now-e.seen < touchAfter
}

// seenDigest is one artifact found present, with its stored last-seen time.
type seenDigest struct {
	d    artifact.Digest
	seen int64
}

func (v *verifiedSet) has(tenant string, d artifact.Digest) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.m[verifiedKey{tenant, d}]
	return ok
}

// add records ds as read intact and present at generation gen.
func (v *verifiedSet) add(tenant string, gen uint64, ds ...seenDigest) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil || len(v.m)+len(ds) > v.max {
		v.m = make(map[verifiedKey]verifiedEntry, min(v.max, 1024))
	}
	for _, d := range ds {
		v.m[verifiedKey{tenant, d.d}] = verifiedEntry{seen: d.seen, gen: gen}
	}
}

// seen updates the last-seen times of artifacts already held, at
// generation gen; artifacts not held stay unheld (their content was not
// read in this process).
func (v *verifiedSet) seen(tenant string, gen uint64, ds []seenDigest) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, d := range ds {
		k := verifiedKey{tenant, d.d}
		if _, ok := v.m[k]; ok {
			v.m[k] = verifiedEntry{seen: d.seen, gen: gen}
		}
	}
}

// unvouched returns the artifacts of arts the set cannot confirm at now
// without reading the store (see verifiedSet), in order. gen is the
// current deletion generation, read under Store.deletes.
func (v *verifiedSet) unvouched(tenant string, arts []*artifact.Artifact, now, touchAfter int64, gen uint64) []*artifact.Artifact {
	v.mu.Lock()
	defer v.mu.Unlock()
	var rest []*artifact.Artifact
	for i, a := range arts {
		e, ok := v.m[verifiedKey{tenant, a.Digest}]
		if ok && e.gen == gen && e.recent(now, touchAfter) {
			continue
		}
		if rest == nil {
			rest = make([]*artifact.Artifact, 0, len(arts)-i)
		}
		rest = append(rest, a)
	}
	return rest
}

// recent reports whether d's stored last-seen time is known to be within
// touchAfter of now, so touching it would write nothing.
func (v *verifiedSet) recent(tenant string, d artifact.Digest, now, touchAfter int64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.m[verifiedKey{tenant, d}]
	return ok && e.recent(now, touchAfter)
}

func (v *verifiedSet) remove(tenant string, d artifact.Digest) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.m, verifiedKey{tenant, d})
}

// readable reads the content record of tenant's d in txn. Any failure to
// read it (a Badger read error included) means no receipt may name it.
func readable(txn *badger.Txn, tenant string, d artifact.Digest, k *seal.Keys) error {
	item, err := txn.Get(vault.ArtKey(tenant, d))
	if err != nil {
		return err
	}
	return item.Value(func(v []byte) error { return vault.CheckSealedContent(v, tenant, d, k) })
}

// dropRecord deletes tenant's artifact d (content and metadata) in txn and
// returns its metadata size, or -1 when it has no metadata.
func dropRecord(txn *badger.Txn, tenant string, d artifact.Digest) (int64, error) {
	mk := vault.MetaKey(tenant, d)
	item, err := txn.Get(mk)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return -1, txn.Delete(vault.ArtKey(tenant, d))
	}
	if err != nil {
		return 0, err
	}
	var m vault.Meta
	size := int64(0)
	if item.Value(m.Decode) == nil {
		size = m.Size()
	}
	if err := txn.Delete(mk); err != nil {
		return 0, err
	}
	return size, txn.Delete(vault.ArtKey(tenant, d))
}

// dropped is forget for a record dropped because it did not read intact:
// it is counted as corrupt and logged.
func (s *Store) dropped(tenant string, d artifact.Digest, size int64, why error) {
	s.forget(tenant, d, size)
	s.corrupt.Add(1)
	s.log.Warn("vault dropped an unreadable artifact; it is stored again when next seen",
		zap.String("artifact", hex.EncodeToString(d[:8])), zap.Int64("bytes", size), zap.NamedError("cause", why))
}

// forget settles the accounting for a record dropRecord deleted (size is
// what it returned), once its transaction committed.
func (s *Store) forget(tenant string, d artifact.Digest, size int64) {
	s.checked.remove(tenant, d)
	if size >= 0 {
		s.bytes.Add(-size)
		s.tenants.add(tenant, -size)
		s.count.Add(-1)
	}
}

// keyDigest splits a content or metadata key into its tenant and digest.
func keyDigest(key []byte) (string, artifact.Digest, bool) {
	var d artifact.Digest
	if len(key) < 2+1+2*len(d) {
		return "", d, false
	}
	if _, err := hex.Decode(d[:], key[len(key)-2*len(d):]); err != nil {
		return "", d, false
	}
	return string(key[2 : len(key)-2*len(d)-1]), d, true
}

// tenantOfKey is the tenant part of a content or metadata key.
func tenantOfKey(key []byte) string {
	t, _, _ := keyDigest(key)
	return t
}

// scrub reads every stored content record once, at scrubRate, and drops the
// ones that no longer read intact. It stops early on Close.
func (s *Store) scrub() {
	cursor := []byte("a/")
	for {
		var bad []verifiedKey
		var why []error
		var next []byte
		var read int64
		err := s.db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte("a/")})
			defer it.Close()
			for it.Seek(cursor); it.Valid() && read < scrubBatch; it.Next() {
				item := it.Item()
				tenant, d, ok := keyDigest(item.Key())
				if !ok {
					continue
				}
				read += item.ValueSize()
				if err := item.Value(func(v []byte) error { return vault.CheckSealedContent(v, tenant, d, nil) }); err != nil {
					bad = append(bad, verifiedKey{tenant, d})
					why = append(why, err)
				}
				next = append(item.KeyCopy(nil), 0)
			}
			if !it.Valid() {
				next = nil
			}
			return nil
		})
		if err != nil {
			s.log.Warn("vault scrub failed", zap.Error(err))
			return
		}
		for i, k := range bad {
			s.dropIfUnreadable(k.tenant, k.d, why[i])
		}
		select {
		case <-s.stop:
			return
		case <-time.After(time.Duration(read * int64(time.Second) / s.scrubRate)):
		}
		if next == nil {
			return
		}
		cursor = next
	}
}

// dropIfUnreadable drops tenant's d unless it reads intact now: a
// concurrent Persist may have replaced it since the scrub read it.
func (s *Store) dropIfUnreadable(tenant string, d artifact.Digest, why error) {
	var size int64
	drop := false
	err := s.deleting(func() (bool, error) {
		err := s.update(context.Background(), func(txn *badger.Txn) error {
			drop = false
			if err := readable(txn, tenant, d, nil); err == nil || errors.Is(err, badger.ErrKeyNotFound) {
				return nil
			}
			drop = true
			var err error
			size, err = dropRecord(txn, tenant, d)
			return err
		})
		return err == nil && drop, err
	})
	if err != nil {
		s.log.Warn("vault could not drop an unreadable artifact", zap.String("artifact", hex.EncodeToString(d[:8])), zap.Error(err))
		return
	}
	if drop {
		s.dropped(tenant, d, size, why)
	}
}
