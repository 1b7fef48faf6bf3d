package badgervault

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/seal"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// Recovery reads the vault by public artifact id and by search; neither is
// a sighting (retention and eviction are not affected), and both see only
// the caller's tenant.

// Resolve returns the digest of tenant's artifact whose public id
// (artifact.ID: "a_" and the first 32 hex digits of the digest) is
// id. A malformed id, or one of no artifact of tenant, is not found. The
// lookup is one prefix seek: metadata keys end in the full hex digest.
func (s *Store) Resolve(ctx context.Context, tenant, id string) (artifact.Digest, bool, error) {
	var d artifact.Digest
	prefix, ok := vault.ArtifactIDHex(id)
	if !ok {
		return d, false, nil
	}
	release, err := s.enter()
	if err != nil {
		return d, false, err
	}
	defer release()
	if err := ctx.Err(); err != nil {
		return d, false, err
	}
	base := tenantMetaPrefix(tenant)
	seek := append(bytes.Clone(base), prefix...)
	found := false
	err = s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: seek})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			// A longer tenant name that starts like this one could share
			// the prefix; its keys are longer than base + 64.
			k := it.Item().Key()
			if len(k) != len(base)+64 {
				continue
			}
			if _, err := hex.Decode(d[:], k[len(base):]); err != nil {
				continue
			}
			found = true
			return nil
		}
		return nil
	})
	if err != nil {
		return artifact.Digest{}, false, fmt.Errorf("vault: resolve: %w", err)
	}
	return d, found, nil
}

func tenantMetaPrefix(tenant string) []byte {
	k := make([]byte, 0, 3+len(tenant))
	k = append(k, "m/"...)
	k = append(k, tenant...)
	return append(k, '/')
}

// Search returns up to limit of tenant's artifacts whose text or tool name
// contains query, ignoring case (an empty query matches every artifact),
// newest first: by creation time, then last-seen time, then digest, so the
// order is deterministic. The artifacts carry Digest, Tool and Chars, never
// Text, Raw or Args. At most maxSearchScan of the tenant's newest artifacts
// are considered, and of those at most SearchScanBytes of stored bytes
// read; a query of more than MaxSearchQueryChars characters is refused
// (ErrSearchQueryTooLong). The scan is linear in the bytes read and stops
// with ctx's error when ctx ends. A record that does not decode is
// skipped: Get reports it.
func (s *Store) Search(ctx context.Context, tenant, query string, limit int) ([]artifact.Artifact, error) {
	if limit <= 0 {
		return nil, nil
	}
	release, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer release()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	scan, err := vault.NewSearchScan(ctx, query)
	if err != nil {
		return nil, err
	}
	base := tenantMetaPrefix(tenant)
	keys := seal.FromContext(ctx)
	var out []artifact.Artifact
	err = s.db.View(func(txn *badger.Txn) error {
		for i, m := range newestMetas(txn, base) {
			if i%64 == 0 {
				if err := scan.Err(); err != nil {
					return err
				}
			}
			if !scan.Charge(m.Size()) {
				return nil // SearchScanBytes read: older artifacts are not searched
			}
			item, err := txn.Get(vault.ArtKey(tenant, m.Digest))
			if err != nil {
				continue // evicted between the scan and now
			}
			tool, match, gone := searchItem(item, scan, keys, tenant, m.Digest)
			if gone != nil {
				return gone
			}
			if match {
				out = append(out, artifact.Artifact{Digest: m.Digest, Tool: tool, Chars: m.Chars})
				if len(out) == limit {
					return nil
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("vault: search: %w", err)
	}
	return out, nil
}

// newestMetas returns the metadata of the artifacts whose keys start with
// base (one tenant's), newest first as Search orders them, and at most
// vault.SearchScanLimit of them. A record that does not decode is skipped.
func newestMetas(txn *badger.Txn, base []byte) []vault.Meta {
	var metas []vault.Meta
	it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 256, Prefix: base})
	for it.Rewind(); it.Valid(); it.Next() {
		if len(it.Item().Key()) != len(base)+64 {
			continue // another tenant whose name extends this one
		}
		var m vault.Meta
		if err := it.Item().Value(m.Decode); err != nil {
			continue
		}
		metas = append(metas, m)
	}
	it.Close()
	slices.SortFunc(metas, func(a, b vault.Meta) int {
		return cmp.Or(cmp.Compare(b.Created, a.Created), cmp.Compare(b.LastSeen, a.LastSeen), bytes.Compare(a.Digest[:], b.Digest[:]))
	})
	return metas[:min(len(metas), vault.SearchScanLimit)]
}

// searchItem opens the content of artifact d (item) and matches it against
// scan: its tool name, whether it matches, and scan's error when the
// caller went away during the scan. Content that does not open or decode
// does not match (Get reports it).
func searchItem(item *badger.Item, scan *vault.SearchScan, keys *seal.Keys, tenant string, d artifact.Digest) (tool string, match bool, gone error) {
	_ = item.Value(func(v []byte) error {
		v, err := vault.OpenContent(keys, tenant, d, v)
		if err != nil {
			return err // skipped: Get reports it
		}
		c, err := vault.ContentFields(v)
		if err != nil {
			return err // skipped: Get reports it
		}
		tool = string(c.Tool)
		match, gone = scan.Match(c.Text, tool)
		return nil
	})
	return tool, match, gone
}
