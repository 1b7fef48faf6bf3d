package vault

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"

	"github.com/tokenterminator/caddy-token-terminator/compiler"
)

// Record stores the lineage node of a forwarded request under its scope, with
// a TTL of Retention, and keeps the artifacts it referenced alive. Recording
// the same request twice writes the same node again.
func (s *Store) Record(ctx context.Context, scope compiler.Scope, rec compiler.Record) error {
	release, err := s.enter()
	if err != nil {
		return err
	}
	defer release()
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now().UnixNano()
	n := node{Length: rec.Length, Parent: rec.Parent, HasParent: rec.HasParent, Time: now, Exposures: rec.Exposures, Cache: rec.Cache}
	key := hex.AppendEncode(scopePrefix(scope), rec.ChainEnd[:])
	val := n.encode()
	err = s.update(ctx, func(txn *badger.Txn) error {
		if err := txn.SetEntry(badger.NewEntry(key, val).WithTTL(s.retention)); err != nil {
			return err
		}
		for _, d := range rec.Referenced {
			// An artifact that is gone cannot be kept alive; the compiler's
			// Persist of the next request will store it again.
			if _, err := s.touch(txn, scope.Tenant, d, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("vault: record: %w", err)
	}
	return nil
}

// Ancestor returns the longest recorded proper prefix of chain in scope. The
// full chain is never considered, so a retried request sees the same ancestry
// as its first attempt. All lookups share one read-only transaction; misses
// are mostly answered by bloom filters.
func (s *Store) Ancestor(ctx context.Context, scope compiler.Scope, chain []compiler.Digest) (compiler.Lineage, error) {
	release, err := s.enter()
	if err != nil {
		return compiler.Lineage{}, err
	}
	defer release()
	if err := ctx.Err(); err != nil {
		return compiler.Lineage{}, err
	}
	if len(chain) < 2 {
		return compiler.Lineage{}, nil
	}
	prefix := scopePrefix(scope)
	var lin compiler.Lineage
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
			item, err := txn.Get(key)
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			var n node
			if err := item.Value(n.decode); err != nil {
				return err
			}
			lin = compiler.Lineage{Found: true, Ancestor: chain[i], Length: i + 1, Exposures: n.Exposures, Cache: n.Cache}
			return nil
		}
		return nil
	})
	if err != nil {
		return compiler.Lineage{}, fmt.Errorf("vault: ancestor: %w", err)
	}
	return lin, nil
}
