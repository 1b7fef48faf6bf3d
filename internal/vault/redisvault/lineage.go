package redisvault

import (
	"context"
	"fmt"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// Record stores the lineage node of a forwarded request under its scope with
// a TTL of Retention, and keeps the artifacts it referenced alive, in one
// script. Recording the same request twice writes the same node again.
func (s *Store) Record(ctx context.Context, scope artifact.Scope, rec artifact.Record) error {
	ctx, done, err := s.call(ctx)
	if err != nil {
		return err
	}
	defer done()
	tk := s.k.tenant(scope.Tenant)
	now := s.now()
	args := make([]any, 4, 4+len(rec.Referenced))
	args[0] = vault.EncodeNode(rec, now.UnixNano())
	args[1], args[2], args[3] = s.retention.Milliseconds(), now.UnixMilli(), s.touchAfter.Milliseconds()
	for _, d := range rec.Referenced {
		args = append(args, hexOf(d))
	}
	if err := recordScript.Run(ctx, s.rdb, []string{tk.scope(scope) + hexOf(rec.ChainEnd), tk.seen}, args...).Err(); err != nil {
		return fmt.Errorf("redisvault: record: %w", err)
	}
	return nil
}

// ancestorBatch is how many prefixes one MGET asks for, longest first.
const ancestorBatch = 256

// Ancestor returns the longest recorded proper prefix of chain in scope.
// The full chain is never considered, so a retry sees the same ancestry as
// its first attempt.
func (s *Store) Ancestor(ctx context.Context, scope artifact.Scope, chain []artifact.Digest) (artifact.Lineage, error) {
	ctx, done, err := s.call(ctx)
	if err != nil {
		return artifact.Lineage{}, err
	}
	defer done()
	if len(chain) < 2 {
		return artifact.Lineage{}, nil
	}
	prefix := s.k.tenant(scope.Tenant).scope(scope)
	for hi := len(chain) - 2; hi >= 0; hi -= ancestorBatch {
		lo := max(0, hi-ancestorBatch+1)
		ks := make([]string, 0, hi-lo+1)
		for i := hi; i >= lo; i-- {
			ks = append(ks, prefix+hexOf(chain[i]))
		}
		vals, err := s.rdb.MGet(ctx, ks...).Result()
		if err != nil {
			return artifact.Lineage{}, fmt.Errorf("redisvault: ancestor: %w", err)
		}
		for j, v := range vals {
			b, ok := v.(string)
			if !ok {
				continue
			}
			i := hi - j
			exp, cache, err := vault.DecodeNode([]byte(b))
			if err != nil {
				return artifact.Lineage{}, fmt.Errorf("redisvault: ancestor %x: %w", chain[i][:8], err)
			}
			return artifact.Lineage{Found: true, Ancestor: chain[i], Length: i + 1, Exposures: exp, Cache: cache}, nil
		}
	}
	return artifact.Lineage{}, nil
}
