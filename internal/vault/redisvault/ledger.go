package redisvault

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// The request ledger of a fleet lives in one capped Redis stream,
// <prefix>{global}:ledger, so every replica's records are read together.
// An entry's id is Redis's own time of the append (replicas' records
// arrive in batches and their clocks differ, and a stream only grows), so a
// time range is an id range to within the writer's batching delay; an
// entry holds the record as JSON in field "r" (content-free: hashes,
// counts, figures), whose own Time is what the stats use.
//
// The bounds: records older than Retention leave by MINID at every
// append; the record bound is MAXLEN. Redis trims a stream by entries, not
// bytes, so MaxBytes is turned into an entry bound from the records'
// actual size (at least one entry).
const ledgerField = "r"

var _ vault.Ledger = (*Store)(nil)

// AppendLedger adds recs in one pipeline and trims the stream to lim.
func (s *Store) AppendLedger(ctx context.Context, recs []vault.LedgerRecord, lim vault.LedgerLimits) error {
	if len(recs) == 0 {
		return nil
	}
	ctx, done, err := s.call(ctx)
	if err != nil {
		return err
	}
	defer done()
	key := s.k.global("ledger")
	vals := make([][]byte, len(recs))
	size := 0
	for i, r := range recs {
		if vals[i], err = json.Marshal(r); err != nil {
			return fmt.Errorf("redisvault: ledger: %w", err)
		}
		size += len(vals[i])
	}
	maxLen := lim.MaxRecords
	if lim.MaxBytes > 0 {
		per := int64(size/len(recs)) + 32 // the entry id and field name
		maxLen = min(maxLen, max(lim.MaxBytes/per, 1))
	}
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, v := range vals {
			p.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: "*", Values: []any{ledgerField, v}})
		}
		if maxLen > 0 {
			p.XTrimMaxLen(ctx, key, maxLen)
		}
		if lim.Retention > 0 {
			p.XTrimMinID(ctx, key, strconv.FormatInt(s.nowMS()-lim.Retention.Milliseconds(), 10))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redisvault: ledger: %w", err)
	}
	return nil
}

// ReadLedger returns the records q selects, newest first.
func (s *Store) ReadLedger(ctx context.Context, q vault.LedgerQuery) ([]vault.LedgerRecord, error) {
	ctx, done, err := s.call(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	end, start := "+", "-"
	if q.Until > 0 {
		end = "(" + strconv.FormatInt(q.Until, 10) // ids of time < Until
	}
	if q.Since > 0 {
		start = strconv.FormatInt(q.Since, 10)
	}
	key := s.k.global("ledger")
	var msgs []redis.XMessage
	if q.Limit > 0 {
		msgs, err = s.rdb.XRevRangeN(ctx, key, end, start, int64(q.Limit)).Result()
	} else {
		msgs, err = s.rdb.XRevRange(ctx, key, end, start).Result()
	}
	if err != nil {
		return nil, fmt.Errorf("redisvault: ledger: %w", err)
	}
	out := make([]vault.LedgerRecord, 0, len(msgs))
	for _, m := range msgs {
		v, ok := m.Values[ledgerField].(string)
		if !ok {
			continue
		}
		var r vault.LedgerRecord
		if json.NewDecoder(strings.NewReader(v)).Decode(&r) == nil {
			out = append(out, r)
		}
	}
	return out, nil
}
