package gateway

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// The recovery loop's buffers count in max_buffered_bytes: a first answer
// the budget has no room for goes to the client unread (as one larger than
// max_body_size does), a follow-up answer that does not fit fails its round
// (the client then gets its own request's answer), and what an exchange
// counted is returned when it ends.
func TestRecoveryBuffersCounted(t *testing.T) {
	var budget atomic.Int64
	budget.Store(900) // what the request's own body and compile hold
	held := &heldBytes{budget: &budget, max: 1000}

	rec := httptest.NewRecorder()
	c := &firstRound{w: rec, header: http.Header{}, max: 1 << 20, hold: held.take}
	c.header.Set("Content-Type", "application/json")
	c.WriteHeader(http.StatusOK)
	if _, err := c.Write(bytes.Repeat([]byte("a"), 60)); err != nil || c.kind != roundJSON {
		t.Fatalf("an answer within the budget: kind %v, %v", c.kind, err)
	}
	if _, err := c.Write(bytes.Repeat([]byte("b"), 60)); err != nil || c.kind != roundPass {
		t.Fatalf("an answer past the budget is held: kind %v, %v", c.kind, err)
	}
	if rec.Body.Len() != 120 {
		t.Fatalf("the client got %d bytes of the answer, want all 120", rec.Body.Len())
	}
	if got := budget.Load(); got != 960 {
		t.Fatalf("budget %d while the exchange holds 60 bytes, want 960", got)
	}

	var buf bytes.Buffer
	bw := &boundedWriter{b: &buf, max: 1 << 20, hold: held.take}
	if _, err := bw.Write(make([]byte, 30)); err != nil {
		t.Fatal(err)
	}
	if _, err := bw.Write(make([]byte, 30)); !errors.Is(err, errRecoveryBusy) {
		t.Fatalf("a follow-up answer past the budget: %v, want errRecoveryBusy", err)
	}
	if held.take(20) {
		t.Fatal("a follow-up body past the budget was taken")
	}
	held.release()
	if got := budget.Load(); got != 900 {
		t.Fatalf("budget %d after the exchange ended, want 900", got)
	}
}
