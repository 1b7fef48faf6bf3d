package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/holdout"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/badgervault"
	"github.com/tokenterminator/caddy-token-terminator/internal/wsrelay"
)

const wsTenant = "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"

// wsMessageBody is a response.create of conversation conv, its type
// first as Codex sends it; a continuation names prev.
func wsMessageBody(conv, prev string) string {
	m := `{"type":"response.create","model":"gpt-5","conv":` + strconv.Quote(conv) + `,"input":"long output"`
	if prev != "" {
		m += `,"previous_response_id":` + strconv.Quote(prev)
	}
	return m + "}"
}

// wsConv is the conversation key the fake compiler gives a message's conv.
func wsConv(conv string) artifact.Digest { return sha256.Sum256([]byte(conv)) }

// wsCompiler stands for the compiler on Responses messages: the
// conversation key comes from the body (its "conv"), the holdout hook is
// asked as the compiler asks it, a rewrite replaces "long" by "r" (in
// shadow it only reports that), and the lineage commit is counted.
func wsCompiler(commits *[]string) *fakeCompiler {
	return &fakeCompiler{fn: func(_ context.Context, req compiler.Request) compiler.Result {
		var v struct{ Conv string }
		_ = json.Unmarshal(req.Body, &v)
		res := compiler.Result{Decision: compiler.Passthrough, Reason: compiler.ReasonNothingToDo, RawBytes: len(req.Body), SentBytes: len(req.Body),
			Model: "gpt-5", Format: provider.Responses, Conversation: wsConv(v.Conv)}
		mode := req.Mode
		if req.Holdout != nil {
			if mode = req.Holdout(res.Conversation); mode == compiler.ModeOff {
				res.Reason = compiler.ReasonHoldout
				return res
			}
		}
		out := []byte(strings.Replace(string(req.Body), "long", "r", 1))
		body := string(req.Body)
		res.Commit = func() { *commits = append(*commits, body) }
		res.Reason, res.Receipts, res.SentBytes = "", 1, len(out)
		if mode == compiler.ModeShadow {
			res.Decision = compiler.Shadow
			return res
		}
		res.Decision, res.Body = compiler.Accepted, out
		return res
	}}
}

// wsTest is a gateway with a ledger and a real tenant hasher, and one
// socket's session on it.
type wsTest struct {
	h       *Gateway
	s       *wsSession
	logs    *observer.ObservedLogs
	store   *badgervault.Store
	commits []string
}

func newWSTest(t testing.TB, mutate func(*Gateway)) *wsTest {
	t.Helper()
	w := &wsTest{}
	h, logs := testHandler(t, wsCompiler(&w.commits), mutate)
	h.Tenants = TenantHasher([]byte("0123456789abcdef-key"))
	store, err := badgervault.Open(badgervault.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	h.Ledger = NewLedgerWriter(store, vault.LedgerLimits{Retention: time.Hour, MaxRecords: 100, MaxBytes: 1 << 20}, h.Metrics, zap.NewNop())
	t.Cleanup(h.Ledger.Close)
	w.h, w.logs, w.store = h, logs, store
	w.s = &wsSession{h: h, ctx: context.Background(), path: "/v1/responses", scope: artifact.Scope{Tenant: wsTenant}}
	return w
}

// relay sends the client messages through the relay as the socket does,
// returning what reaches the provider, one payload per message.
func (w *wsTest) relay(t *testing.T, msgs ...string) []string {
	t.Helper()
	var in []byte
	for _, m := range msgs {
		in = wsrelay.AppendFrame(in, true, wsrelay.OpText, true, [4]byte{9, 8, 7, 6}, []byte(m))
	}
	rd := wsrelay.NewReader(bytes.NewReader(in), w.h.MaxBodySize, w.s.rewrite)
	rd.Admit, rd.Passed = w.s.admit, w.s.passedUnread
	out, err := io.ReadAll(&relayConn{rd: rd, s: w.s})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(out) > 0 {
		hd, _, _ := wsrelay.ParseHeader(out)
		p := bytes.Clone(out[hd.Size : int64(hd.Size)+hd.Length])
		wsrelay.MaskBytes(hd.Key, 0, p)
		got = append(got, string(p))
		out = out[int64(hd.Size)+hd.Length:]
	}
	return got
}

// answer is the provider's answer to the oldest message: response.created,
// then the terminal event.
func (w *wsTest) answer(id, terminal string) {
	w.s.providerMessage([]byte(`{"type":"response.created","response":{"id":"` + id + `"}}`))
	w.s.providerMessage([]byte(`{"type":"response.output_text.delta","delta":"x"}`))
	w.s.providerMessage([]byte(terminal))
}

func completed(id string) string {
	return `{"type":"response.completed","response":{"id":"` + id + `","model":"gpt-5","usage":{"input_tokens":900,"output_tokens":12,"input_tokens_details":{"cached_tokens":640}}}}`
}

func (w *wsTest) ledger(t *testing.T) []vault.LedgerRecord {
	t.Helper()
	w.h.Ledger.Flush(context.Background())
	recs, err := w.store.ReadLedger(context.Background(), vault.LedgerQuery{})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func (w *wsTest) lines() []map[string]any {
	var out []map[string]any
	for _, e := range w.logs.All() {
		if e.Message == "websocket message" {
			out = append(out, e.ContextMap())
		}
	}
	return out
}

// TestWebSocketOutcomeRecord: every response.create is one outcome record,
// settled by the provider's terminal event for it: the ledger record
// (websocket, the usage of response.completed priced), the metrics and a
// content-free log line; the lineage is committed on response.completed
// only; a message the socket's close leaves unanswered is settled then.
func TestWebSocketOutcomeRecord(t *testing.T) {
	tests := []struct {
		name        string
		terminal    string // "" : the socket closes unanswered
		wantStatus  int
		wantOutcome string
		wantUsage   bool
		wantCommit  bool
	}{
		{"completed", completed("r1"), 200, "", true, true},
		{"failed", `{"type":"response.failed","response":{"id":"r1"}}`, 200, "failed", false, false},
		{"error", `{"type":"error","status":429,"error":{"type":"rate_limit"}}`, 429, "error", false, false},
		{"closed unanswered", "", 0, "closed", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWSTest(t, nil)
			msg := wsMessageBody("a", "")
			got := w.relay(t, msg)
			if len(got) != 1 || got[0] != strings.Replace(msg, "long", "r", 1) {
				t.Fatalf("forwarded %q", got)
			}
			if len(w.lines()) != 0 {
				t.Fatal("the message was logged before the provider answered")
			}
			if tt.terminal != "" {
				w.answer("r1", tt.terminal)
			}
			w.s.closeSocket()
			w.s.closeSocket() // settled once
			recs := w.ledger(t)
			if len(recs) != 1 {
				t.Fatalf("%d ledger records", len(recs))
			}
			r := recs[0]
			if !r.WebSocket || r.Tenant != wsTenant || r.Decision != "accepted" || r.Status != tt.wantStatus || r.RawBytes != int64(len(msg)) ||
				r.SentBytes != int64(len(got[0])) || r.Format != provider.Responses || r.Conversation == "" {
				t.Fatalf("ledger record %+v", r)
			}
			if (r.Usage != nil) != tt.wantUsage || (tt.wantUsage && (r.Usage.CacheRead != 640 || r.Usage.Uncached != 260 || r.Usage.Output != 12)) {
				t.Fatalf("usage %+v", r.Usage)
			}
			if (len(w.commits) == 1) != tt.wantCommit {
				t.Fatalf("commits %d", len(w.commits))
			}
			family := provider.ModelLabel("gpt-5")
			if v := testutil.ToFloat64(w.h.Metrics.candidates.WithLabelValues(string(provider.Responses), "accepted", "", family)); v != 1 {
				t.Fatalf("candidates %v", v)
			}
			if v := testutil.ToFloat64(w.h.Metrics.bytes.WithLabelValues(string(provider.Responses), family, "saved")); v != float64(len(msg)-len(got[0])) {
				t.Fatalf("saved bytes %v", v)
			}
			if v := testutil.ToFloat64(w.h.Metrics.usageTokens.WithLabelValues(string(provider.Responses), family, usageCacheRead)); tt.wantUsage && v != 640 {
				t.Fatalf("cache_read tokens %v", v)
			}
			lines := w.lines()
			if len(lines) != 1 {
				t.Fatalf("%d log lines", len(lines))
			}
			l := lines[0]
			if l["websocket"] != true || l["decision"] != "accepted" || l["status"] != int64(tt.wantStatus) || (l["outcome"] != nil) != (tt.wantOutcome != "") {
				t.Fatalf("log line %v", l)
			}
			for _, e := range w.logs.All() {
				for _, v := range e.ContextMap() {
					if s, ok := v.(string); ok && strings.Contains(s, "output") {
						t.Fatalf("content in the log: %v", e.ContextMap())
					}
				}
			}
		})
	}
}

// TestWebSocketReservation: a message the budget cannot hold, or whose
// compile's working memory it cannot reserve, goes on as it came
// (passthrough=busy, one outcome record), the next message still
// compiles, and once everything is handed on nothing stays reserved.
func TestWebSocketReservation(t *testing.T) {
	small := wsMessageBody("a", "")
	big := wsMessageBody(strings.Repeat("b", 2000), "")
	tests := []struct {
		name      string
		others    int64 // bytes other requests hold
		msgs      []string
		rewritten []bool
		wantBusy  int
		unread    int // of them, refused while held: never read whole
	}{
		{"all fit", 0, []string{small, small}, []bool{true, true}, 0, 0},
		{"too large to hold", 0, []string{big, small}, []bool{false, true}, 1, 1},
		{"no room for the compile", 1500, []string{small}, []bool{false}, 1, 0},
		{"too many awaiting answers", 0, slices.Repeat([]string{small}, wsQueueMax+1), append(slices.Repeat([]bool{true}, wsQueueMax), false), 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWSTest(t, func(h *Gateway) { h.MaxBufferedBytes = 2000 })
			w.h.Buffered.Add(tt.others)
			got := w.relay(t, tt.msgs...)
			if len(got) != len(tt.msgs) {
				t.Fatalf("%d messages forwarded", len(got))
			}
			for i, m := range tt.msgs {
				if rw := got[i] != m; rw != tt.rewritten[i] {
					t.Fatalf("message %d rewritten %v, want %v", i, rw, tt.rewritten[i])
				}
			}
			if b, r := w.h.Buffered.Load(), w.h.Reading.Load(); b != tt.others || r != 0 {
				t.Fatalf("%d bytes buffered, %d reading after the messages went on", b-tt.others, r)
			}
			for i := range tt.msgs {
				id := "r" + strconv.Itoa(i)
				w.answer(id, completed(id))
			}
			busy, unread := 0, 0
			for _, l := range w.lines() {
				if l["reason"] == string(ReasonBusy) {
					busy++
				}
				if l["raw_bytes"] == int64(-1) {
					unread++
				}
			}
			if len(w.lines()) != len(tt.msgs) || busy != tt.wantBusy || unread != tt.unread {
				t.Fatalf("%d lines, %d busy, %d unread", len(w.lines()), busy, unread)
			}
			if v := testutil.ToFloat64(w.h.Metrics.failOpen.WithLabelValues(string(ReasonBusy))); int(v) != tt.wantBusy {
				t.Fatalf("fail_open busy %v", v)
			}
		})
	}
}

// armed finds a conversation name whose arm is arm for the test tenant.
func armed(t *testing.T, h *Gateway, arm holdout.Arm, not string) string {
	t.Helper()
	a := holdout.NewAssigner(h.holdoutKey(), h.holdoutShare(wsTenant))
	for i := 0; i < 1000; i++ {
		c := "conv-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		if c != not && a.Arm(wsTenant, h.conversationID(wsTenant, wsConv(c))) == arm {
			return c
		}
	}
	t.Fatal("no conversation in the arm")
	return ""
}

// TestWebSocketHoldout: a control conversation's messages go on as they
// came and are measured in the holdout's figures; a continuation
// (previous_response_id) inherits the arm of the conversation its chain
// belongs to whatever its own items would key; a continuation of a
// response the socket does not know is assigned by its own key.
func TestWebSocketHoldout(t *testing.T) {
	tests := []struct {
		name     string
		open     holdout.Arm // the opening's conversation's arm
		own      holdout.Arm // the arm the continuation's own items would key
		prev     string      // the continuation's previous_response_id
		wantCont holdout.Arm
	}{
		{"control opening, control continuation", holdout.Control, holdout.Control, "r1", holdout.Control},
		{"continuation inherits control", holdout.Control, holdout.Treatment, "r1", holdout.Control},
		{"continuation inherits treatment", holdout.Treatment, holdout.Control, "r1", holdout.Treatment},
		{"unknown chain keyed by its own items", holdout.Control, holdout.Treatment, "r9", holdout.Treatment},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWSTest(t, func(h *Gateway) { h.Holdout = NewHoldout(5000) })
			open := armed(t, w.h, tt.open, "")
			own := armed(t, w.h, tt.own, open)
			first, cont := wsMessageBody(open, ""), wsMessageBody(own, tt.prev)
			got := w.relay(t, first)
			w.answer("r1", completed("r1"))
			got = append(got, w.relay(t, cont)...)
			w.answer("r2", completed("r2"))
			for i, want := range []struct {
				msg string
				arm holdout.Arm
			}{{first, tt.open}, {cont, tt.wantCont}} {
				if asCame := got[i] == want.msg; asCame != (want.arm == holdout.Control) {
					t.Fatalf("message %d (%s) forwarded as it came: %v", i, want.arm, asCame)
				}
			}
			recs := w.ledger(t)
			if len(recs) == 2 && recs[0].RawBytes != int64(len(first)) {
				recs[0], recs[1] = recs[1], recs[0] // written in the same millisecond
			}
			if len(recs) != 2 || recs[0].Arm != tt.open.String() || recs[1].Arm != tt.wantCont.String() {
				t.Fatalf("ledger arms %+v", recs)
			}
			if (tt.prev == "r1") != (recs[0].Conversation == recs[1].Conversation) {
				t.Fatalf("conversations %q %q", recs[0].Conversation, recs[1].Conversation)
			}
			for _, r := range recs {
				if r.Arm == holdout.Control.String() && (r.Reason != string(compiler.ReasonHoldout) || r.SentBytes != r.RawBytes || r.ShadowSentBytes >= r.RawBytes) {
					t.Fatalf("control record %+v", r)
				}
			}
			for i, l := range w.lines() {
				if l["arm"] != recs[i].Arm {
					t.Fatalf("log line %d arm %v", i, l["arm"])
				}
			}
			controls := 0
			for _, a := range []holdout.Arm{tt.open, tt.wantCont} {
				if a == holdout.Control {
					controls++
				}
			}
			if v := testutil.ToFloat64(w.h.Metrics.holdout.requests.WithLabelValues("control", untenanted)); int(v) != controls {
				t.Fatalf("holdout control requests %v, want %d", v, controls)
			}
			if v := testutil.ToFloat64(w.h.Metrics.holdout.billed.WithLabelValues("control", untenanted, provider.ModelLabel("gpt-5"))); (v > 0) != (controls > 0) {
				t.Fatalf("control billed %v", v)
			}
		})
	}
}
