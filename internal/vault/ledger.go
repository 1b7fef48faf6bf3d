package vault

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// LedgerRecord is the content-free record of one candidate request: what
// the gateway decided and what it saved. It never holds prompt content,
// tool arguments, credentials or raw model names: tenants and
// conversations are keyed hashes, the model is its normalized family.
type LedgerRecord struct {
	Time         int64  `json:"t"` // unix milliseconds
	Tenant       string `json:"tenant,omitempty"`
	TenantLabel  string `json:"tenant_label,omitempty"` // the operator's name for the tenant
	Conversation string `json:"conversation,omitempty"`
	Format       string `json:"format"`
	Model        string `json:"model,omitempty"` // normalized family, e.g. "gpt-4o", "claude-sonnet"
	Status       int    `json:"status"`          // the provider's answer, 0 when none
	Decision     string `json:"decision"`
	Reason       string `json:"reason,omitempty"`
	RawBytes     int64  `json:"raw_bytes"`
	SentBytes    int64  `json:"sent_bytes"`
	// Tokens as the gate measured them; both 0 when it did not.
	RawTokens  int `json:"raw_tokens,omitempty"`
	SentTokens int `json:"sent_tokens,omitempty"`
	Receipts   int `json:"receipts"`
	Folded     int `json:"folded"`
	// Expected billed input cost in base-input-token units; 0 when the
	// cost model did not judge the request.
	CostRaw  float64 `json:"cost_raw,omitempty"`
	CostSent float64 `json:"cost_sent,omitempty"`
	// The same over the decision's horizon (the third veto's figures: this
	// request plus reading its prompt back on the following ones, from the
	// cache as the conversation left it); 0 when not judged, and in
	// records written before they were kept.
	CostHorizonRaw  float64 `json:"cost_horizon_raw,omitempty"`
	CostHorizonSent float64 `json:"cost_horizon_sent,omitempty"`
	// Usage is what the provider reported it billed for the input; nil
	// when its answer carried no usage (and in older records).
	Usage *LedgerUsage `json:"usage,omitempty"`
	// Price is one base-price input token of the request's provider
	// family in Currency, when the operator configured it (cost_prices
	// input_price, cost_currency): the cost figures times Price are
	// money. 0 when not configured.
	Price    float64 `json:"price,omitempty"`
	Currency string  `json:"currency,omitempty"`
	// The holdout (caddymodule holdout.go). Arm is "treatment" or
	// "control"; "" when the request was in no arm (no holdout, or its
	// conversation key was never known). Retry: the body was the
	// conversation's previous one sent again. A control request went out
	// as the client sent it; its shadow compile's figures (what treatment
	// would have sent) are ShadowSentBytes and ShadowCostSent, or
	// ShadowSkipped when it was shed under load.
	Arm             string  `json:"arm,omitempty"`
	Retry           bool    `json:"retry,omitempty"`
	ShadowSkipped   bool    `json:"shadow_skipped,omitempty"`
	ShadowSentBytes int64   `json:"shadow_sent_bytes,omitempty"`
	ShadowCostSent  float64 `json:"shadow_cost_sent,omitempty"`
}

// LedgerUsage is the provider's own account of a request's input tokens,
// split by how they are billed, and their price by the same cost model
// the expected figures use.
type LedgerUsage struct {
	Uncached   int `json:"uncached"`    // input tokens at the base price
	CacheRead  int `json:"cache_read"`  // read from the provider's prompt cache
	CacheWrite int `json:"cache_write"` // written to it (Anthropic's cache creation)
	// Cost prices the three in base-input-token units (cost_sent's units).
	Cost float64 `json:"cost"`
	// RecoveryRounds counts the upstream requests beyond the first that
	// the figures sum: the gateway's recovery rounds answered the model's
	// recovery tool calls, and each was billed.
	RecoveryRounds int `json:"recovery_rounds,omitempty"`
	// Output is the output tokens the provider billed (not priced in
	// Cost, which is of the input).
	Output int `json:"output,omitempty"`
}

// LedgerLimits bound a ledger: records older than Retention, and the
// oldest records beyond MaxRecords or MaxBytes (encoded keys and values),
// are dropped.
type LedgerLimits struct {
	Retention  time.Duration
	MaxRecords int64
	MaxBytes   int64
}

// LedgerQuery selects records: Since <= Time < Until (unix ms; 0 = no
// bound), newest first, at most Limit (0 = all).
type LedgerQuery struct {
	Since, Until int64
	Limit        int
}

// Ledger is the optional interface of a backend that keeps the request
// ledger. A backend without it runs with metrics only.
type Ledger interface {
	// AppendLedger stores records (one batch) and drops what lim no
	// longer allows, oldest first.
	AppendLedger(ctx context.Context, recs []LedgerRecord, lim LedgerLimits) error
	// ReadLedger returns the records q selects, newest first, within the
	// retention of the last append's limits.
	ReadLedger(ctx context.Context, q LedgerQuery) ([]LedgerRecord, error)
}

var _ Ledger = (*Store)(nil)

// ledgerPrefix is the Badger key prefix of ledger records:
//
//	r/<8-byte big-endian unix ms><8-byte big-endian sequence>
//
// so keys sort by time and the oldest are first. Records carry a TTL of
// the retention and have their own bound (LedgerLimits), apart from the
// artifact capacity.
var ledgerPrefix = []byte("r/")

// ledgerState is the Store's running count of ledger records and bytes.
type ledgerState struct {
	mu        sync.Mutex // serializes appends and trims
	counted   bool       // count and bytes were scanned
	count     int64
	bytes     int64
	seq       uint64
	retention atomic.Int64 // of the last append, for reads
}

func ledgerKey(ms int64, seq uint64) []byte {
	k := make([]byte, 0, len(ledgerPrefix)+16)
	k = append(k, ledgerPrefix...)
	k = binary.BigEndian.AppendUint64(k, uint64(ms))
	return binary.BigEndian.AppendUint64(k, seq)
}

func ledgerKeyTime(k []byte) int64 {
	if len(k) < len(ledgerPrefix)+8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(k[len(ledgerPrefix):]))
}

// AppendLedger implements Ledger.
func (s *Store) AppendLedger(ctx context.Context, recs []LedgerRecord, lim LedgerLimits) error {
	release, err := s.enter()
	if err != nil {
		return err
	}
	defer release()
	if lim.Retention <= 0 || lim.MaxRecords <= 0 || lim.MaxBytes <= 0 {
		return errors.New("vault: ledger limits must be positive")
	}
	l := &s.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	l.retention.Store(int64(lim.Retention))
	if !l.counted {
		if err := s.countLedger(); err != nil {
			return err
		}
	}
	nowMs := s.now().UnixMilli()
	oldest := nowMs - lim.Retention.Milliseconds()
	var added, addedBytes int64
	err = s.update(ctx, func(txn *badger.Txn) error {
		added, addedBytes = 0, 0
		for i := range recs {
			r := &recs[i]
			if r.Time < oldest {
				continue // already past retention
			}
			v, err := json.Marshal(r)
			if err != nil {
				return err
			}
			l.seq++
			k := ledgerKey(r.Time, l.seq)
			e := badger.NewEntry(k, v)
			// Badger expires by the wall clock: the record's remaining
			// lifetime by the Store's clock, from now.
			left := time.Duration(r.Time-oldest) * time.Millisecond
			e.ExpiresAt = uint64(time.Now().Add(left).Unix()) + 1
			if err := txn.SetEntry(e); err != nil {
				return err
			}
			added++
			addedBytes += int64(len(k) + len(v))
		}
		return nil
	})
	if err != nil {
		return err
	}
	l.count += added
	l.bytes += addedBytes
	if l.count > lim.MaxRecords || l.bytes > lim.MaxBytes {
		return s.trimLedger(ctx, lim, oldest)
	}
	return nil
}

// countLedger scans the ledger's keys (values stay unread) for its size.
// Called with ledger.mu held.
func (s *Store) countLedger() error {
	var n, b int64
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: ledgerPrefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
			b += int64(len(it.Item().Key())) + int64(it.Item().ValueSize())
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !s.ledger.counted {
		// Sequence numbers only tell apart records of one millisecond;
		// starting from the clock keeps them apart across restarts too.
		s.ledger.seq = uint64(time.Now().UnixNano())
	}
	s.ledger.count, s.ledger.bytes, s.ledger.counted = n, b, true
	return nil
}

// trimLedger drops records older than oldest, then the oldest until the
// ledger is within 90% of its bounds (so that not every append trims).
// Called with ledger.mu held.
func (s *Store) trimLedger(ctx context.Context, lim LedgerLimits, oldest int64) error {
	// Recount first: records that expired by TTL are no longer seen.
	if err := s.countLedger(); err != nil {
		return err
	}
	l := &s.ledger
	wantN, wantB := lim.MaxRecords-lim.MaxRecords/10, lim.MaxBytes-lim.MaxBytes/10
	var drop [][]byte
	n, b := l.count, l.bytes
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: ledgerPrefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			if ledgerKeyTime(k) >= oldest && n <= wantN && b <= wantB {
				break
			}
			drop = append(drop, it.Item().KeyCopy(nil))
			n--
			b -= int64(len(k)) + int64(it.Item().ValueSize())
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Deletes are small; one batch holds many of them.
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	for _, k := range drop {
		if err := wb.Delete(k); err != nil {
			return err
		}
	}
	if err := wb.Flush(); err != nil {
		return err
	}
	l.count, l.bytes = n, b
	return ctx.Err()
}

// ReadLedger implements Ledger.
func (s *Store) ReadLedger(ctx context.Context, q LedgerQuery) ([]LedgerRecord, error) {
	release, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer release()
	since := q.Since
	if ret := time.Duration(s.ledger.retention.Load()); ret > 0 {
		since = max(since, s.now().UnixMilli()-ret.Milliseconds())
	}
	var out []LedgerRecord
	err = s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: ledgerPrefix, Reverse: true, PrefetchValues: true, PrefetchSize: 256})
		defer it.Close()
		seek := append(bytes.Clone(ledgerPrefix), 0xff)
		if q.Until > 0 {
			seek = ledgerKey(q.Until, 0) // sorts before every record at Until
		}
		for it.Seek(seek); it.Valid(); it.Next() {
			k := it.Item().Key()
			t := ledgerKeyTime(k)
			if q.Until > 0 && t >= q.Until {
				continue
			}
			if t < since {
				break
			}
			var r LedgerRecord
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &r) }); err != nil {
				return err
			}
			out = append(out, r)
			if q.Limit > 0 && len(out) >= q.Limit {
				break
			}
			if len(out)%1024 == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
		}
		return nil
	})
	return out, err
}
