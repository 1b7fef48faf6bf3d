package badgervault

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// Lineage nodes carry cumulative exposures, so storing each one whole makes
// a conversation of n requests cost O(n^2) bytes (every node repeats every
// artifact seen so far). Instead a node stores only the exposures that
// differ from its base, an ancestor chosen like a Fenwick tree's parent: the
// node at depth d (its count of recorded ancestors) is based on the ancestor
// at depth d&(d-1), the depth with the lowest set bit cleared, and depth 0
// is stored whole. A node's delta then spans lowbit(d) requests, so a
// conversation costs O(n log n) bytes, and resolving a node follows at most
// popcount(d) <= log2(n)+1 base links. A base that has expired or cannot be
// read makes the next node start over at depth 0 (whole); a node whose base
// is gone is skipped by Ancestor, which then finds an older one or none, and
// the request inlines more: never less correct, at worst less compressed.

// maxBaseHops bounds the base links followed when resolving a node.
const maxBaseHops = 64

// Record stores the lineage node of a forwarded request under its scope, with
// a TTL of Retention, and keeps the artifacts it referenced alive. Recording
// the same request twice writes the same node again. The node's bytes count
// in the vault's capacity; when they do not fit the node is not stored
// (ErrFull), but the referenced artifacts are still kept alive.
func (s *Store) Record(ctx context.Context, scope artifact.Scope, rec artifact.Record) error {
	release, err := s.enter()
	if err != nil {
		return err
	}
	defer release()
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now().UnixNano()
	prefix := vault.ScopePrefix(scope)
	key := hex.AppendEncode(bytes.Clone(prefix), rec.ChainEnd[:])
	var val []byte
	var old int64
	err = s.db.View(func(txn *badger.Txn) error {
		n, err := baseNode(txn, prefix, rec)
		if err != nil {
			return err
		}
		n.Time = now
		val = n.Encode()
		item, err := txn.Get(key)
		if err == nil {
			old = int64(len(key)) + item.ValueSize()
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("vault: record: %w", err)
	}
	size := int64(len(key) + len(val))
	full := s.reserveCap(size)
	store := full == nil
	gen := s.deletionGen() // before the transaction (see verifiedSet)
	var touched []seenDigest
	err = s.update(ctx, func(txn *badger.Txn) error {
		touched = touched[:0]
		if store {
			if err := txn.SetEntry(badger.NewEntry(key, val).WithTTL(s.retention)); err != nil {
				return err
			}
		}
		for _, d := range rec.Referenced {
			if s.checked.recent(scope.Tenant, d, now, int64(s.touchAfter)) {
				continue // touching it would write nothing
			}
			// An artifact that is gone cannot be kept alive; the compiler's
			// Persist of the next request will store it again.
			seen, ok, err := s.touch(txn, scope.Tenant, d, now)
			if err != nil {
				return err
			}
			if ok {
				touched = append(touched, seenDigest{d, seen})
			}
		}
		return nil
	})
	if err == nil {
		s.checked.seen(scope.Tenant, gen, touched) // what verify may vouch for again
	}
	if store {
		if err != nil {
			s.bytes.Add(-size)
		} else {
			// A node written again replaces the old one's bytes.
			s.bytes.Add(-old)
			s.lineage.Add(size - old)
		}
	}
	if err == nil {
		err = full
	}
	if err != nil {
		return fmt.Errorf("vault: record: %w", err)
	}
	return nil
}

// baseNode builds rec's node: a delta against its base when the parent's
// lineage can be resolved, else whole at depth 0.
func baseNode(txn *badger.Txn, prefix []byte, rec artifact.Record) (vault.Node, error) {
	n := vault.Node{Length: rec.Length, Parent: rec.Parent, HasParent: rec.HasParent, Exposures: rec.Exposures, Cache: rec.Cache}
	if !rec.HasParent {
		return n, nil
	}
	parent, ok, err := loadNode(txn, prefix, rec.Parent)
	if err != nil || !ok {
		return n, err
	}
	depth := parent.Depth + 1
	want := depth & (depth - 1)
	baseID, base := rec.Parent, parent
	for hops := 0; base.Depth > want; hops++ {
		if !base.HasBase || hops == maxBaseHops {
			return n, nil
		}
		baseID = base.Base
		if base, ok, err = loadNode(txn, prefix, baseID); err != nil || !ok {
			return n, err
		}
	}
	if base.Depth != want {
		return n, nil
	}
	exp, ok, err := resolve(txn, prefix, base)
	if err != nil || !ok {
		return n, err
	}
	n.Depth, n.Base, n.HasBase = depth, baseID, true
	n.Exposures = exposureDelta(rec.Exposures, exp)
	return n, nil
}

// exposureDelta is what turns base into cur.
func exposureDelta(cur, base map[artifact.Digest]int) map[artifact.Digest]int {
	out := map[artifact.Digest]int{}
	for d, c := range cur {
		if b, ok := base[d]; !ok || b != c {
			out[d] = c
		}
	}
	for d := range base {
		if _, ok := cur[d]; !ok {
			out[d] = vault.DeletedExposure
		}
	}
	return out
}

// loadNode reads the node filed under id in prefix. A missing or unreadable
// node is reported absent: lineage only ever makes requests smaller, so
// losing some of it is safe.
func loadNode(txn *badger.Txn, prefix []byte, id artifact.Digest) (vault.Node, bool, error) {
	return loadNodeKey(txn, hex.AppendEncode(bytes.Clone(prefix), id[:]))
}

func loadNodeKey(txn *badger.Txn, key []byte) (vault.Node, bool, error) {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return vault.Node{}, false, nil
	}
	if err != nil {
		return vault.Node{}, false, err
	}
	var n vault.Node
	if err := item.Value(n.Decode); err != nil {
		return vault.Node{}, false, nil
	}
	return n, true, nil
}

// resolve returns n's cumulative exposures, following its base links; false
// when a base is missing.
func resolve(txn *badger.Txn, prefix []byte, n vault.Node) (map[artifact.Digest]int, bool, error) {
	chain := []vault.Node{n}
	for cur := n; cur.HasBase; {
		if len(chain) > maxBaseHops {
			return nil, false, nil
		}
		next, ok, err := loadNode(txn, prefix, cur.Base)
		if err != nil || !ok {
			return nil, false, err
		}
		if next.Depth >= cur.Depth {
			return nil, false, nil // not a base: stored by something else
		}
		chain = append(chain, next)
		cur = next
	}
	if len(chain) == 1 {
		return n.Exposures, true, nil // decoded for this call: not shared
	}
	exp := maps.Clone(chain[len(chain)-1].Exposures)
	for i := len(chain) - 2; i >= 0; i-- {
		for d, c := range chain[i].Exposures {
			if c == vault.DeletedExposure {
				delete(exp, d)
			} else {
				exp[d] = c
			}
		}
	}
	return exp, true, nil
}

// Ancestor returns the longest recorded proper prefix of chain in scope whose
// exposures resolve. The full chain is never considered, so a retried
// request sees the same ancestry as its first attempt. All lookups share one
// read-only transaction; misses are mostly answered by bloom filters.
func (s *Store) Ancestor(ctx context.Context, scope artifact.Scope, chain []artifact.Digest) (artifact.Lineage, error) {
	release, err := s.enter()
	if err != nil {
		return artifact.Lineage{}, err
	}
	defer release()
	if err := ctx.Err(); err != nil {
		return artifact.Lineage{}, err
	}
	if len(chain) < 2 {
		return artifact.Lineage{}, nil
	}
	prefix := vault.ScopePrefix(scope)
	var lin artifact.Lineage
	err = s.db.View(func(txn *badger.Txn) error {
		key := make([]byte, len(prefix), len(prefix)+64)
		copy(key, prefix)
		for i := len(chain) - 2; i >= 0; i-- {
			if i%64 == 63 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			key = hex.AppendEncode(key[:len(prefix)], chain[i][:])
			n, ok, err := loadNodeKey(txn, key)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			exp, ok, err := resolve(txn, prefix, n)
			if err != nil {
				return err
			}
			if !ok {
				continue // its base expired: an older node may still resolve
			}
			lin = artifact.Lineage{Found: true, Ancestor: chain[i], Length: i + 1, Exposures: exp, Cache: n.Cache}
			return nil
		}
		return nil
	})
	if err != nil {
		return artifact.Lineage{}, fmt.Errorf("vault: ancestor: %w", err)
	}
	return lin, nil
}

// lineageSize sums the keys and values of the lineage records that have not
// expired.
func (s *Store) lineageSize() (int64, error) {
	var n int64
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte("l/")})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n += int64(len(it.Item().Key())) + it.Item().ValueSize()
		}
		return nil
	})
	return n, err
}

// recountLineage replaces the lineage part of the byte count with a fresh
// scan: records leave by TTL, which no counter sees. A Record racing the
// scan may be counted twice until the next pass.
func (s *Store) recountLineage() {
	n, err := s.lineageSize()
	if err != nil {
		s.log.Warn("vault lineage scan failed", zap.Error(err))
		return
	}
	s.bytes.Add(n - s.lineage.Swap(n))
}
