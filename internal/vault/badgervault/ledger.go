package badgervault

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

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

var _ vault.Ledger = (*Store)(nil)

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
func (s *Store) AppendLedger(ctx context.Context, recs []vault.LedgerRecord, lim vault.LedgerLimits) error {
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
func (s *Store) trimLedger(ctx context.Context, lim vault.LedgerLimits, oldest int64) error {
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
func (s *Store) ReadLedger(ctx context.Context, q vault.LedgerQuery) ([]vault.LedgerRecord, error) {
	release, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer release()
	since := q.Since
	if ret := time.Duration(s.ledger.retention.Load()); ret > 0 {
		since = max(since, s.now().UnixMilli()-ret.Milliseconds())
	}
	var out []vault.LedgerRecord
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
			var r vault.LedgerRecord
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
