package recovery

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// TestStitcherFail: a loop that fails before any round completed, after
// the client was sent part of the answer, ends a Responses stream with
// response.failed (the announced response, status failed, the output
// shown, the next sequence_number, nothing of ours); a stream that
// carried an error event, or a round that completed, ends as Close ends
// it; other formats end as Close leaves them.
func TestStitcherFail(t *testing.T) {
	why := errors.New("a provider message over the relay's bound")
	for _, format := range allFormats {
		c := loopCase{format: format, rounds: 2, mixed: true}
		_, _, body := setupLoop(t, c)
		first := roundStream(t, c, body, 0)
		errEv := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"server_error\",\"message\":\"x\"}}\n\n"
		cases := []struct {
			name     string
			feed     []byte
			wantEnd  string // the client stream's last event, "" for none added
			complete bool
		}{
			{name: "cut short", feed: first[:len(first)/2], wantEnd: "response.failed"},
			{name: "error event", feed: append(bytes.Clone(first[:bytes.Index(first, []byte("\n\n"))+2]), errEv...), wantEnd: "error"},
			{name: "round complete", feed: first, wantEnd: "response.completed", complete: true},
		}
		for _, tc := range cases {
			t.Run(string(format)+"/"+tc.name, func(t *testing.T) {
				var client bytes.Buffer
				st, _ := NewStitcher(format, &client, Config{})
				st.Write(tc.feed)
				if !tc.complete {
					if _, err := st.EndRound(); !errors.Is(err, ErrIncomplete) {
						t.Fatalf("EndRound: %v", err)
					}
				} else if r, err := st.EndRound(); err != nil || !r.Continue {
					t.Fatalf("EndRound: %v %+v", err, r)
				}
				before := client.Len()
				err := st.Fail(why)
				if bytes.Contains(client.Bytes(), []byte(ToolName)) {
					t.Fatalf("our tool in the client stream:\n%s", client.Bytes())
				}
				if format != provider.Responses {
					if !tc.complete && (client.Len() != before || !errors.Is(err, ErrIncomplete)) {
						t.Fatalf("%s: Fail added %q (%v)", format, client.Bytes()[before:], err)
					}
					return
				}
				if err != nil && !(tc.wantEnd == "error" && errors.Is(err, ErrIncomplete)) {
					t.Fatalf("Fail: %v", err)
				}
				evs := clientEvents(t, client.Bytes())
				last := evs[len(evs)-1]
				if last.name != tc.wantEnd {
					t.Fatalf("last event %q, want %q:\n%s", last.name, tc.wantEnd, client.Bytes())
				}
				for i, ev := range evs {
					if ev.name != "error" && num(ev.data["sequence_number"]) != i {
						t.Fatalf("sequence_number %v at %d", ev.data["sequence_number"], i)
					}
				}
				if tc.wantEnd != "response.failed" {
					return
				}
				resp, _ := last.data["response"].(map[string]any)
				e, _ := resp["error"].(map[string]any)
				if last.data["type"] != "response.failed" || resp["status"] != "failed" || e["code"] != "server_error" || e["message"] != why.Error() {
					t.Fatalf("failure event %s", last.raw)
				}
				if _, ok := resp["output"].([]any); !ok {
					t.Fatalf("failure event without its output: %s", last.raw)
				}
				n := client.Len()
				if st.Fail(why) != nil || client.Len() != n {
					t.Fatal("Fail twice is a no-op")
				}
			})
		}
	}
}
