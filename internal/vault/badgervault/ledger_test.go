package badgervault

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

func ledgerRecs(from time.Time, n int, every time.Duration) []vault.LedgerRecord {
	recs := make([]vault.LedgerRecord, n)
	for i := range recs {
		recs[i] = vault.LedgerRecord{
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
	lim := vault.LedgerLimits{Retention: 30 * 24 * time.Hour, MaxRecords: 1000, MaxBytes: 1 << 20}

	start := clk.Now()
	// 40 daily records ending now: only the last 30 days' are kept.
	recs := ledgerRecs(start.Add(-39*24*time.Hour), 40, 24*time.Hour)
	if err := s.AppendLedger(ctx, recs, lim); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadLedger(ctx, vault.LedgerQuery{})
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
	if got, _ = s.ReadLedger(ctx, vault.LedgerQuery{}); len(got) != 21 {
		t.Fatalf("after 10 days: %d records, want 21", len(got))
	}

	// Since / Until / Limit select by time, newest first.
	q := vault.LedgerQuery{Since: recs[30].Time, Until: recs[35].Time, Limit: 3}
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
		lim  vault.LedgerLimits
	}{
		{"records", vault.LedgerLimits{Retention: time.Hour, MaxRecords: 100, MaxBytes: 1 << 30}},
		{"bytes", vault.LedgerLimits{Retention: time.Hour, MaxRecords: 1 << 30, MaxBytes: 20 << 10}},
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
			got, err := s.ReadLedger(ctx, vault.LedgerQuery{})
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
	lim := vault.LedgerLimits{Retention: time.Hour, MaxRecords: 1000, MaxBytes: 1 << 20}
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
	got, err := s.ReadLedger(context.Background(), vault.LedgerQuery{})
	if err != nil || len(got) != 10 || s.ledger.count != 10 {
		t.Fatalf("after reopen: %d records (counted %d), err %v; want 10", len(got), s.ledger.count, err)
	}
}

// TestLedgerRecordFormats: a record round-trips with every field, records
// written before the horizon and usage figures existed still decode (their
// new fields zero / nil), and a record without usage stores no usage key.
func TestLedgerRecordFormats(t *testing.T) {
	clk := newClock()
	s := openTest(t, Config{now: clk.Now})
	ctx := context.Background()
	lim := vault.LedgerLimits{Retention: time.Hour, MaxRecords: 100, MaxBytes: 1 << 20}
	now := clk.Now().UnixMilli()

	// As the ledger wrote records before cost_horizon_* and usage.
	old := `{"t":` + strconv.FormatInt(now-2, 10) + `,"tenant":"t1","tenant_label":"acme","conversation":"c_1","format":"openai_chat",` +
		`"model":"gpt-4o","status":200,"decision":"accepted","raw_bytes":1000,"sent_bytes":100,"raw_tokens":250,"sent_tokens":30,` +
		`"receipts":1,"folded":0,"cost_raw":250,"cost_sent":90}`
	if err := s.db.Update(func(txn *badger.Txn) error {
		return txn.Set(ledgerKey(now-2, 1), []byte(old))
	}); err != nil {
		t.Fatal(err)
	}
	wantOld := vault.LedgerRecord{Time: now - 2, Tenant: "t1", TenantLabel: "acme", Conversation: "c_1", Format: "openai_chat",
		Model: "gpt-4o", Status: 200, Decision: "accepted", RawBytes: 1000, SentBytes: 100, RawTokens: 250, SentTokens: 30,
		Receipts: 1, CostRaw: 250, CostSent: 90}
	full := vault.LedgerRecord{Time: now - 1, Tenant: "t2", Format: "anthropic_messages", Model: "claude-sonnet", Status: 200,
		Decision: "accepted", RawBytes: 5000, SentBytes: 900, Receipts: 2, Folded: 1, CostRaw: 1250, CostSent: 1400,
		CostHorizonRaw: 2250, CostHorizonSent: 1800,
		Usage: &vault.LedgerUsage{Uncached: 12, CacheRead: 800, CacheWrite: 300, Cost: 12 + 80 + 375, RecoveryRounds: 1}}
	noUsage := vault.LedgerRecord{Time: now, Tenant: "t2", Format: "openai_chat", Decision: "passthrough", Reason: "not_smaller",
		RawBytes: 70, SentBytes: 70, CostRaw: 20, CostSent: 20, CostHorizonRaw: 30, CostHorizonSent: 30}
	if err := s.AppendLedger(ctx, []vault.LedgerRecord{full, noUsage}, lim); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadLedger(ctx, vault.LedgerQuery{})
	if err != nil {
		t.Fatal(err)
	}
	want := []vault.LedgerRecord{noUsage, full, wantOld}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read back\n got %+v\nwant %+v", got, want)
	}
	if got[2].Usage != nil || got[2].CostHorizonRaw != 0 {
		t.Fatalf("the old record gained figures: %+v", got[2])
	}
	// Optional means absent: a record without usage or horizon stores neither key.
	enc, _ := json.Marshal(vault.LedgerRecord{Time: now, Decision: "passthrough"})
	if bytes.Contains(enc, []byte("usage")) || bytes.Contains(enc, []byte("horizon")) {
		t.Fatalf("empty figures encoded: %s", enc)
	}
}
