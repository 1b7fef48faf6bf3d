package redisvault

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/seal"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// Recovery reads the vault by public artifact id and by search, with the
// rules of Badger's (vault/search.go): neither is a sighting, and both see
// only the caller's tenant (its hash-tagged keys).

// searchTimeoutFactor: Search reads up to vault.SearchScanLimit records, so
// it is bounded by this many op timeouts rather than one.
const searchTimeoutFactor = 10

// scanCount is the COUNT hint of the HSCAN/ZSCAN pages Resolve and Search
// read: incremental, so a large tenant never blocks the server for long.
const scanCount = 1000

// contentBatch is how many artifact contents one MGET of Search reads.
const contentBatch = 64

// Resolve returns the digest of tenant's artifact whose public id
// (artifact.ID) is id. A malformed id, or one of no artifact of
// tenant, is not found. The tenant's metadata hash is scanned for fields
// starting with the id's hex digits.
func (s *Store) Resolve(ctx context.Context, tenant, id string) (artifact.Digest, bool, error) {
	var d artifact.Digest
	prefix, ok := vault.ArtifactIDHex(id)
	if !ok {
		return d, false, nil
	}
	ctx, done, err := s.call(ctx)
	if err != nil {
		return d, false, err
	}
	defer done()
	meta := s.k.tenant(tenant).meta
	for cursor := uint64(0); ; {
		kv, next, err := s.rdb.HScan(ctx, meta, cursor, prefix+"*", scanCount).Result()
		if err != nil {
			return d, false, fmt.Errorf("redisvault: resolve: %w", err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if len(kv[i]) != 64 {
				continue
			}
			if _, err := hex.Decode(d[:], []byte(kv[i])); err == nil {
				return d, true, nil
			}
		}
		if next == 0 {
			return artifact.Digest{}, false, nil
		}
		cursor = next
	}
}

// searchRecord is one artifact's metadata as Search orders it.
type searchRecord struct {
	hex               string
	digest            artifact.Digest
	size              int64 // stored bytes, charged against vault.SearchScanBytes
	chars             int
	created, lastSeen int64
}

// Search returns up to limit of tenant's artifacts whose text or tool name
// contains query, ignoring case (an empty query matches every artifact),
// newest first: by creation time, then last-seen time, then digest. Hits
// carry Digest, Tool and Chars, never Text, Raw or Args. At most
// vault.SearchScanLimit of the tenant's newest artifacts are considered, of
// them at most vault.SearchScanBytes read, and a query longer than
// vault.MaxSearchQueryChars is refused; the scan is linear and stops when
// ctx ends. A record that does not decode is skipped (Get reports it).
func (s *Store) Search(ctx context.Context, tenant, query string, limit int) ([]artifact.Artifact, error) {
	if limit <= 0 {
		return nil, nil
	}
	// The scan looks at the caller's context: a client that hangs up
	// stops it (the op timeouts bound the Redis reads).
	keys := seal.FromContext(ctx)
	scan, err := vault.NewSearchScan(ctx, query)
	if err != nil {
		return nil, err
	}
	ctx, done, err := s.callWithin(ctx, searchTimeoutFactor*s.lim().opTimeout)
	if err != nil {
		return nil, err
	}
	defer done()
	tk := s.k.tenant(tenant)
	recs, err := s.searchRecords(ctx, tk)
	if err != nil {
		return nil, fmt.Errorf("redisvault: search: %w", err)
	}
	slices.SortFunc(recs, func(a, b searchRecord) int {
		return cmp.Or(cmp.Compare(b.created, a.created), cmp.Compare(b.lastSeen, a.lastSeen), bytes.Compare(a.digest[:], b.digest[:]))
	})
	recs = recs[:min(len(recs), vault.SearchScanLimit)]
	var out []artifact.Artifact
	for start := 0; start < len(recs); start += contentBatch {
		batch := recs[start:min(start+contentBatch, len(recs))]
		// The batch is what vault.SearchScanBytes still allows: older
		// artifacts past it are not read.
		for i, r := range batch {
			if !scan.Charge(r.size) {
				batch = batch[:i]
				break
			}
		}
		if len(batch) == 0 {
			return out, nil
		}
		ks := make([]string, len(batch))
		for i, r := range batch {
			ks[i] = tk.artifact(r.hex)
		}
		vals, err := s.rdb.MGet(ctx, ks...).Result()
		if err != nil {
			return nil, fmt.Errorf("redisvault: search: %w", err)
		}
		for i, v := range vals {
			str, ok := v.(string)
			if !ok {
				continue // evicted between the scan and now
			}
			a := artifact.Artifact{Digest: batch[i].digest}
			plain, err := vault.OpenContent(keys, tenant, a.Digest, vault.StringBytes(str))
			if err != nil || vault.DecodeContent(plain, &a) != nil {
				continue
			}
			match, err := scan.Match(vault.StringBytes(a.Text), a.Tool)
			if err != nil {
				return nil, fmt.Errorf("redisvault: search: %w", err)
			}
			if match {
				out = append(out, artifact.Artifact{Digest: a.Digest, Tool: a.Tool, Chars: batch[i].chars})
				if len(out) == limit {
					return out, nil
				}
			}
		}
	}
	return out, nil
}

// searchRecords reads every artifact record of a tenant: metadata (size,
// chars, creation time) and last-seen times, page by page.
func (s *Store) searchRecords(ctx context.Context, tk tenantKeys) ([]searchRecord, error) {
	seen := map[string]int64{}
	for cursor := uint64(0); ; {
		kv, next, err := s.rdb.ZScan(ctx, tk.seen, cursor, "", scanCount).Result()
		if err != nil {
			return nil, err
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if ms, err := strconv.ParseFloat(kv[i+1], 64); err == nil {
				seen[kv[i]] = int64(ms)
			}
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	var recs []searchRecord
	for cursor := uint64(0); ; {
		kv, next, err := s.rdb.HScan(ctx, tk.meta, cursor, "", scanCount).Result()
		if err != nil {
			return nil, err
		}
		for i := 0; i+1 < len(kv); i += 2 {
			r := searchRecord{hex: kv[i]}
			if len(r.hex) != 64 {
				continue
			}
			if _, err := hex.Decode(r.digest[:], []byte(r.hex)); err != nil {
				continue
			}
			var err error
			if r.size, r.chars, r.created, err = parseMetaCreated(kv[i+1]); err != nil {
				continue
			}
			last, ok := seen[r.hex]
			if !ok {
				continue // evicted between the two scans
			}
			r.lastSeen = last
			if r.created < 0 {
				r.created = last
			}
			recs = append(recs, r)
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	return recs, nil
}
