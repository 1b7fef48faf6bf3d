package vault

import (
	"context"
	"testing"
	"time"
)

func ledgerRecs(from time.Time, n int, every time.Duration) []LedgerRecord {
	recs := make([]LedgerRecord, n)
	for i := range recs {
		recs[i] = LedgerRecord{
			Time: from.Add(time.Duration(i) * every).UnixMilli(), Tenant: "t1", Format: "openai_chat",
			Decision: "accepted", RawBytes: int64(1000 + i), SentBytes: 100, Receipts: 1,
		}
	}
	return recs
}

// TestLedgerRetention: records older than the retention are neither kept
// nor returned, whether they arrive late or age out.
func TestLedgerRetention(t *testing.T) {
	clk := newClock()
	s := openTest(t, Config{now: clk.Now})
	ctx := context.Background()
	lim := LedgerLimits{Retention: 30 * 24 * time.Hour, MaxRecords: 1000, MaxBytes: 1 << 20}

	start := clk.Now()
	// 40 daily records ending now: only the last 30 days' are kept.
	recs := ledgerRecs(start.Add(-39*24*time.Hour), 40, 24*time.Hour)
	if err := s.AppendLedger(ctx, recs, lim); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadLedger(ctx, LedgerQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 31 { // days -30 … 0, the bound included
		t.Fatalf("%d records, want 31", len(got))
	}
	if got[0].Time != recs[39].Time || got[len(got)-1].Time != recs[9].Time {
		t.Fatalf("not newest first, or wrong window: first %d last %d", got[0].Time, got[len(got)-1].Time)
	}

	// Ten days on, ten more have aged out.
	clk.Add(10 * 24 * time.Hour)
	if got, _ = s.ReadLedger(ctx, LedgerQuery{}); len(got) != 21 {
		t.Fatalf("after 10 days: %d records, want 21", len(got))
	}

	// Since / Until / Limit select by time, newest first.
	q := LedgerQuery{Since: recs[30].Time, Until: recs[35].Time, Limit: 3}
	got, _ = s.ReadLedger(ctx, q)
	if len(got) != 3 || got[0].Time != recs[34].Time || got[2].Time != recs[32].Time {
		t.Fatalf("query %+v: %d records %+v", q, len(got), got)
	}
}

// TestLedgerBounds: past MaxRecords or MaxBytes the oldest records go
// first, and the ledger stays within its bounds.
func TestLedgerBounds(t *testing.T) {
	tests := []struct {
		name string
		lim  LedgerLimits
	}{
		{"records", LedgerLimits{Retention: time.Hour, MaxRecords: 100, MaxBytes: 1 << 30}},
		{"bytes", LedgerLimits{Retention: time.Hour, MaxRecords: 1 << 30, MaxBytes: 20 << 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			s := openTest(t, Config{now: clk.Now})
			ctx := context.Background()
			all := ledgerRecs(clk.Now().Add(-30*time.Minute), 500, time.Second)
			for i := 0; i < len(all); i += 50 {
				if err := s.AppendLedger(ctx, all[i:i+50], tt.lim); err != nil {
					t.Fatal(err)
				}
				if s.ledger.count > tt.lim.MaxRecords || s.ledger.bytes > tt.lim.MaxBytes {
					t.Fatalf("after %d: %d records, %d bytes, over %+v", i+50, s.ledger.count, s.ledger.bytes, tt.lim)
				}
			}
			got, err := s.ReadLedger(ctx, LedgerQuery{})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 || int64(len(got)) != s.ledger.count {
				t.Fatalf("read %d records, counted %d", len(got), s.ledger.count)
			}
			// What is left is the newest, contiguous.
			for i, r := range got {
				if want := all[len(all)-1-i]; r.Time != want.Time || r.RawBytes != want.RawBytes {
					t.Fatalf("record %d is %+v, want %+v", i, r, want)
				}
			}
			if len(got) == len(all) {
				t.Fatal("nothing was dropped")
			}
		})
	}
}

// TestLedgerReopen: the ledger and its count survive a restart.
func TestLedgerReopen(t *testing.T) {
	clk := newClock()
	dir := t.TempDir()
	lim := LedgerLimits{Retention: time.Hour, MaxRecords: 1000, MaxBytes: 1 << 20}
	s, err := Open(Config{Dir: dir, now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AppendLedger(context.Background(), ledgerRecs(clk.Now(), 7, time.Millisecond), lim); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openTest(t, Config{Dir: dir, now: clk.Now})
	if err := s.AppendLedger(context.Background(), ledgerRecs(clk.Now(), 3, time.Millisecond), lim); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadLedger(context.Background(), LedgerQuery{})
	if err != nil || len(got) != 10 || s.ledger.count != 10 {
		t.Fatalf("after reopen: %d records (counted %d), err %v; want 10", len(got), s.ledger.count, err)
	}
}
