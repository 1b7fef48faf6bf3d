package gateway

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

const labelA = "0123456789abcdef0123456789abcdef"

// TestRetryDetection: the same body resent by a conversation is a retry;
// another conversation's identical body is not; memory stays bounded.
func TestRetryDetection(t *testing.T) {
	var l lastBodies
	key := []byte("k")
	if l.resent(key, "c1", []byte("a")) || !l.resent(key, "c1", []byte("a")) || l.resent(key, "c2", []byte("a")) || l.resent(key, "c1", []byte("b")) {
		t.Fatal("retries misjudged")
	}
	for i := 0; i < 3*lastBodiesMax; i++ {
		l.resent(key, fmt.Sprint(i), nil)
	}
	if len(l.cur) > lastBodiesMax || len(l.old) > lastBodiesMax {
		t.Fatalf("%d + %d conversations remembered", len(l.cur), len(l.old))
	}
}

// TestHoldoutHook: a control conversation compiles in shadow, or, when
// every compile slot was taken as its request arrived, not at all (counted
// as skipped); its report says passthrough=holdout with what went (the
// original), the shadow's figures kept apart; a treatment conversation
// keeps the tenant's mode; without a holdout there is no hook.
func TestHoldoutHook(t *testing.T) {
	h := &Gateway{Config: Config{Mode: compiler.ModeEnforce, TenantLabels: map[string]string{labelA: "team-a"}}}
	h.Holdout = NewHoldout(10000)
	h.Holdout.Shares["team-a"] = 0
	h.Tenants = TenantHasher([]byte("0123456789abcdef-key"))
	tenant := strings.Repeat("e", 32)
	conv := artifact.Digest{1}

	ex := &exchange{}
	hook := h.holdoutHook(ex, tenant, compiler.ModeEnforce, false)
	if hook == nil || hook(conv) != compiler.ModeShadow || ex.out.hold.arm() != "control" {
		t.Fatal("a control conversation does not compile in shadow")
	}
	// The outcome as a shadow compile left it (the hook set its arm).
	ex.out.rawBytes, ex.out.sentBytes, ex.out.receipts, ex.out.costRaw, ex.out.costSent, ex.out.tenant = 1000, 400, 2, 50, 20, tenant
	h.settleHoldout(ex, compiler.Result{Decision: compiler.Shadow, SentBytes: 400, CostSent: 20, Conversation: conv}, []byte("body"))
	if ex.out.reason != compiler.ReasonHoldout || ex.out.sentBytes != 1000 || ex.out.receipts != 0 || ex.out.costSent != 50 ||
		ex.out.hold.shadowSentBytes != 400 || ex.out.hold.shadowCostSent != 20 || ex.out.hold.shadowSkipped {
		t.Fatalf("control report %+v hold %+v", ex.out, ex.out.hold)
	}
	var rec vault.LedgerRecord
	holdoutRecord(&rec, &ex.out)
	if rec.Arm != "control" || rec.ShadowSentBytes != 400 || rec.Retry {
		t.Fatalf("ledger record %+v", rec)
	}
	// The same body again is a retry.
	ex.out.hold.retry = false
	h.settleHoldout(ex, compiler.Result{Decision: compiler.Shadow, Conversation: conv}, []byte("body"))
	if !ex.out.hold.retry {
		t.Fatal("the resent body is not flagged as a retry")
	}

	busy := &exchange{}
	if m := h.holdoutHook(busy, tenant, compiler.ModeEnforce, true)(conv); m != compiler.ModeOff || busy.out.hold.arm() != "control" {
		t.Fatalf("under load a control request compiles (%s)", m)
	}
	h.settleHoldout(busy, compiler.Result{Reason: compiler.ReasonHoldout, Conversation: conv}, nil)
	if !busy.out.hold.shadowSkipped || busy.out.reason != compiler.ReasonHoldout {
		t.Fatal("the skipped shadow is not counted")
	}
	if h.holdoutHook(&exchange{}, labelA, compiler.ModeEnforce, false) != nil {
		t.Fatal("a label with holdout 0 has a hook")
	}
	h.Holdout = NewHoldout(5000)
	n := 0
	for i := 0; i < 400; i++ {
		e := &exchange{}
		if h.holdoutHook(e, tenant, compiler.ModeShadow, false)(artifact.Digest{byte(i), byte(i >> 8)}) == compiler.ModeShadow && e.out.hold.arm() == "control" {
			n++
		}
	}
	if n < 150 || n > 250 {
		t.Fatalf("holdout 50%%: %d of 400 conversations in control", n)
	}
}
