package gateway

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/wsrelay"
)

// wsRigMax is the rig's bound on a provider message in these tests.
const wsRigMax = 4096

// bigItem is a provider message over wsRigMax: an output item whose text
// the client must never see.
func bigItem(typ string) string {
	item := `{"type":"message","id":"msg_big","role":"assistant","content":[{"type":"output_text","text":"` + strings.Repeat("X", wsRigMax) + `"}]}`
	if typ == "response.completed" {
		return `{"type":"response.completed","sequence_number":3,"response":{"id":"resp_1","output":[` + item + `],"tools":[],"usage":{"input_tokens":20,"output_tokens":2,"total_tokens":22}}}`
	}
	return `{"type":"` + typ + `","sequence_number":1,"output_index":0,"item":` + item + `}`
}

// send writes provider messages to the relay.
func (r *wsLoopRig) send(evs []string) {
	for _, ev := range evs {
		if _, err := r.rc.Write(wsrelay.AppendFrame(nil, true, wsrelay.OpText, false, [4]byte{}, []byte(ev))); err != nil {
			r.t.Fatal(err)
		}
	}
}

// ended reads the client's messages up to its response's end
// (response.completed or response.failed).
func (r *wsLoopRig) ended() []string {
	var got []string
	for {
		m, ok := <-r.cli
		if !ok {
			r.t.Fatalf("the client's stream ended after %q", got)
		}
		got = append(got, m)
		if strings.Contains(m, `"type":"response.completed"`) || strings.Contains(m, `"type":"response.failed"`) {
			return got
		}
	}
}

// The loop failing inside a provider response: a provider message over
// the relay's bound, or one for which max_buffered_bytes has no room,
// or a follow-up without room. The client's response ends well formed
// from the last complete round (response.failed when none completed),
// with sequence numbers in a row and nothing of the tool or of the
// dropped rest; nothing is committed, no follow-up goes out after the
// failure, the loop's reservations are all returned, and the next
// message on the socket is answered as it should be.
func TestWebSocketLoopFailsInsideResponse(t *testing.T) {
	callItem := callRound("resp_1")[1:3] // our call, in a follow-up's answer
	text := textRound("resp_1")
	cases := []struct {
		name      string
		first     []string // round 0 (after which a follow-up goes out, if not refused)
		full      int      // before which of first's messages max_buffered_bytes is filled (-1: never)
		followUp  bool     // a follow-up goes out
		second    []string // the follow-up's answer
		fill      bool     // max_buffered_bytes is full before second
		wantEnd   string   // the client's last message's type
		wantMsgs  int
		wantFinal string // the id the client's final message names
		wantInput int    // usage_input on the message's log line: every response the provider answered whole
	}{
		{name: "over the bound inside a follow-up's answer", first: callRound("resp_0"), full: -1, followUp: true,
			second:  append(append([]string{text[0], bigItem("response.output_item.added")}, callItem...), callRound("resp_1")[3]),
			wantEnd: "response.completed", wantMsgs: 2, wantFinal: "resp_0", wantInput: 20},
		{name: "over the bound inside the first round",
			first: append([]string{callRound("resp_0")[0], bigItem("response.output_item.added")}, callRound("resp_0")[1:]...),
			full:  -1, wantEnd: "response.failed", wantMsgs: 2, wantFinal: "resp_0", wantInput: 10},
		{name: "a follow-up's answer ends over the bound", first: callRound("resp_0"), full: -1, followUp: true,
			second:  []string{text[0], text[1], text[2], bigItem("response.completed")},
			wantEnd: "response.completed", wantMsgs: 4, wantFinal: "resp_0", wantInput: 10},
		{name: "no room for a follow-up's answer", first: callRound("resp_0"), full: -1, followUp: true,
			second: append([]string{text[0]}, callRound("resp_1")[1:]...), fill: true,
			wantEnd: "response.completed", wantMsgs: 2, wantFinal: "resp_0", wantInput: 20},
		{name: "no room for the follow-up", first: callRound("resp_0"), full: 3,
			wantEnd: "response.completed", wantMsgs: 2, wantFinal: "resp_0", wantInput: 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var commits atomic.Int32
			r := newWSLoopRig(t, &commits, 30*time.Second)
			r.rc.tap.Max = wsRigMax
			h := r.rc.s.h
			r.create(`{"type":"response.create","receipt":1}`)
			var filled int64
			for i, ev := range tc.first {
				if i == tc.full {
					// Room for this message and not for the follow-up.
					filled = h.MaxBufferedBytes - h.Buffered.Load() - wsStitchFactor*int64(len(ev))
					h.Buffered.Add(filled)
				}
				r.send([]string{ev})
			}
			if tc.followUp {
				var fu struct {
					Prev string `json:"previous_response_id"`
				}
				if err := json.Unmarshal(r.upstream(), &fu); err != nil || fu.Prev != "resp_0" {
					t.Fatalf("follow-up: %+v %v", fu, err)
				}
				if tc.fill {
					filled = h.MaxBufferedBytes
					h.Buffered.Add(filled)
				}
				r.send(tc.second)
			}
			got := r.ended()
			last := got[len(got)-1]
			for i, m := range got {
				if strings.Contains(m, "token_terminator") || strings.Contains(m, "call_tt") || strings.Contains(m, "XXXX") ||
					!strings.Contains(m, `"sequence_number":`+itoa(i)) {
					t.Fatalf("client message %d: %.300s", i, m)
				}
			}
			if len(got) != tc.wantMsgs || !strings.Contains(last, `"type":"`+tc.wantEnd+`"`) || !strings.Contains(last, `"id":"`+tc.wantFinal+`"`) {
				t.Fatalf("client got %d messages, the last %.300s", len(got), last)
			}
			if tc.wantEnd == "response.failed" && (!strings.Contains(last, `"status":"failed"`) || !strings.Contains(last, `"code":"server_error"`)) {
				t.Fatalf("failure %.300s", last)
			}
			// The message's record: not committed, ended by the failure,
			// with the usage of every response the provider answered whole.
			lines := r.logs.FilterMessage("websocket message").All()
			if len(lines) != 1 {
				t.Fatalf("%d websocket message lines", len(lines))
			}
			f := lines[0].ContextMap()
			if f["outcome"] != "recovery_failed" || f["usage_input"] != int64(tc.wantInput) {
				t.Fatalf("the message's record: outcome %v, usage_input %v (want %d)", f["outcome"], f["usage_input"], tc.wantInput)
			}
			// Room again; the loop returned what it held.
			h.Buffered.Add(-filled)
			if n := h.Buffered.Load(); n != 0 {
				t.Fatalf("%d bytes still reserved after the loop", n)
			}
			// The next message: what goes upstream is it (no follow-up
			// was sent late), and its answer reaches the client whole.
			if p := r.create(`{"type":"response.create","plain":1}`); !strings.Contains(string(p), `"tools"`) || strings.Contains(string(p), "previous_response_id") {
				t.Fatalf("upstream after the failure: %s", p)
			}
			if got := r.provider(textRound("resp_2")); len(got) != 4 || !strings.Contains(got[3], `"id":"resp_2"`) {
				t.Fatalf("the next message: client got %q", got)
			}
			if n := commits.Load(); n != 1 {
				t.Fatalf("%d commits, want the next message's only", n)
			}
		})
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// A socket that closes while a loop waits for its follow-up's answer
// returns what the loop held in max_buffered_bytes.
func TestWebSocketLoopReleasedOnClose(t *testing.T) {
	var commits atomic.Int32
	r := newWSLoopRig(t, &commits, 30*time.Second)
	h := r.rc.s.h
	r.create(`{"type":"response.create","receipt":1}`)
	r.send(callRound("resp_0"))
	r.upstream() // the follow-up
	if h.Buffered.Load() == 0 {
		t.Fatal("the loop holds nothing in max_buffered_bytes")
	}
	r.rc.Close()
	if n := h.Buffered.Load(); n != 0 {
		t.Fatalf("%d bytes still reserved after the close", n)
	}
}
