//go:build unix

package redisvault

import (
	"context"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// The fleet's ledger is one capped stream: records come back newest first,
// limited, bounded by record count and bytes, and dropped past retention.
func TestLedger(t *testing.T) {
	srv := startServer(t)
	st := srv.open(t, Config{})
	ctx := context.Background()
	rec := func(i int) vault.LedgerRecord {
		return vault.LedgerRecord{Time: time.Now().UnixMilli(), Tenant: "t", Format: "openai_chat", Decision: "accepted", RawBytes: int64(1000 + i), SentBytes: 10}
	}
	var batch []vault.LedgerRecord
	for i := range 10 {
		batch = append(batch, rec(i))
	}
	if err := st.AppendLedger(ctx, batch, vault.LedgerLimits{MaxRecords: 100}); err != nil {
		t.Fatal(err)
	}
	got, err := st.ReadLedger(ctx, vault.LedgerQuery{})
	if err != nil || len(got) != 10 || got[0].RawBytes != 1009 || got[9].RawBytes != 1000 {
		t.Fatalf("read all: %d records, err %v: %+v", len(got), err, got)
	}
	if got, _ := st.ReadLedger(ctx, vault.LedgerQuery{Limit: 3}); len(got) != 3 || got[0].RawBytes != 1009 {
		t.Fatalf("limit 3: %+v", got)
	}
	if got, _ := st.ReadLedger(ctx, vault.LedgerQuery{Until: time.Now().Add(-time.Hour).UnixMilli()}); len(got) != 0 {
		t.Fatalf("until an hour ago: %d records", len(got))
	}
	// Record bound: the oldest leave first.
	if err := st.AppendLedger(ctx, []vault.LedgerRecord{rec(10)}, vault.LedgerLimits{MaxRecords: 4}); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.ReadLedger(ctx, vault.LedgerQuery{}); len(got) != 4 || got[0].RawBytes != 1010 || got[3].RawBytes != 1007 {
		t.Fatalf("after MaxRecords 4: %+v", got)
	}
	// Byte bound: a budget of about two records keeps two.
	one := int64(len(`{"t":1796123543235,"tenant":"t","format":"openai_chat","status":0,"decision":"accepted","raw_bytes":1011,"sent_bytes":10,"receipts":0,"folded":0}`)) + 32
	if err := st.AppendLedger(ctx, []vault.LedgerRecord{rec(11)}, vault.LedgerLimits{MaxRecords: 100, MaxBytes: 2 * one}); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.ReadLedger(ctx, vault.LedgerQuery{}); len(got) != 2 || got[0].RawBytes != 1011 {
		t.Fatalf("after MaxBytes of two records: %+v", got)
	}
	// Retention: a clock two hours ahead with a one-hour retention drops all.
	later := srv.open(t, Config{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	if err := later.AppendLedger(ctx, []vault.LedgerRecord{rec(12)}, vault.LedgerLimits{MaxRecords: 100, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.ReadLedger(ctx, vault.LedgerQuery{}); len(got) != 0 {
		t.Fatalf("after retention: %d records", len(got))
	}
}
