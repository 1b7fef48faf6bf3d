package recovery

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery/recoverytest"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
)

// roundStream returns the provider stream of round k of a case.
func roundStream(t *testing.T, c loopCase, body []byte, k int) []byte {
	t.Helper()
	turn, err := recoverytest.Model{Format: c.format, ID: "a_x", Rounds: c.rounds, Mixed: c.mixed}.Answer(body)
	if err != nil {
		t.Fatal(err)
	}
	return turn.Stream(c.format, k)
}

type flushRecorder struct {
	bytes.Buffer
	flushes int
}

func (f *flushRecorder) Flush() { f.flushes++ }

// TestStitcherFailures: whatever fails after the client stream began, the
// client still receives a well-formed answer without our calls.
func TestStitcherFailures(t *testing.T) {
	ctx := context.Background()
	for _, format := range allFormats {
		c := loopCase{format: format, rounds: 2, mixed: true}
		mem, model, body := setupLoop(t, c)
		first := roundStream(t, c, body, 0)
		// What the client may see of it: the same stream echoing the
		// client's tools, without the gateway's.
		turn0, _ := model.Answer(body)
		firstClient := turn0.Echo([]byte(requests[format])).Stream(format, 0)

		t.Run(string(format)+"/first round cut short", func(t *testing.T) {
			var client flushRecorder
			st, _ := NewStitcher(format, &client, Config{})
			st.Write(first[:len(first)/2])
			if !st.Started() || client.flushes == 0 {
				t.Fatal("text must reach the client (and be flushed) while the round streams")
			}
			if _, err := st.EndRound(); !errors.Is(err, ErrIncomplete) {
				t.Fatalf("EndRound: %v", err)
			}
			if err := st.Close(); !errors.Is(err, ErrIncomplete) {
				t.Fatalf("Close: %v", err)
			}
			if !bytes.HasPrefix(firstClient, client.Bytes()) || bytes.Contains(client.Bytes(), []byte(ToolName)) {
				t.Fatalf("the client gets a prefix of the stream and nothing of ours:\n%s", client.Bytes())
			}
		})

		// After a round that continued, the follow-up fails (no second
		// round), or the second round is cut short: Close finishes the
		// client stream from the first round.
		for _, second := range []string{"none", "cut"} {
			t.Run(string(format)+"/after a continued round, second "+second, func(t *testing.T) {
				var client bytes.Buffer
				st, _ := NewStitcher(format, &client, Config{})
				st.Write(first)
				r, err := st.EndRound()
				if err != nil || !r.Continue {
					t.Fatalf("round 0: %v %+v", err, r)
				}
				if second == "cut" {
					Run(ctx, Config{}, mem, loopTenant, r.Calls)
					next, err := FollowUp(format, body, r.Answer, r.Calls)
					if err != nil {
						t.Fatal(err)
					}
					turn, _ := model.Answer(next)
					s2 := turn.Stream(format, 1)
					st.Write(s2[:len(s2)*2/3])
					if _, err := st.EndRound(); !errors.Is(err, ErrIncomplete) {
						t.Fatalf("EndRound: %v", err)
					}
				}
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
				if err := st.Close(); err != nil {
					t.Fatal("Close twice is a no-op")
				}
				checkWellFormed(t, format, client.Bytes())
				// The client calls of the last complete round are released.
				rd := response.NewReader(format, response.Options{Stream: true})
				rd.Write(client.Bytes())
				if calls := callIDs(rd.ToolCalls()); len(calls) != 1 || calls[0] != "client_0" {
					t.Fatalf("client calls %v", calls)
				}
			})
		}

		t.Run(string(format)+"/error event", func(t *testing.T) {
			var client bytes.Buffer
			st, _ := NewStitcher(format, &client, Config{})
			errEv := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
			st.Write(first[:bytes.Index(first, []byte("\n\n"))+2])
			st.Write([]byte(errEv))
			if _, err := st.EndRound(); !errors.Is(err, ErrIncomplete) {
				t.Fatalf("EndRound: %v", err)
			}
			st.Close()
			if !strings.HasSuffix(client.String(), errEv) {
				t.Fatalf("the error reaches the client as sent:\n%s", client.String())
			}
		})

		t.Run(string(format)+"/client gone", func(t *testing.T) {
			st, _ := NewStitcher(format, failWriter{}, Config{})
			if _, err := st.Write(first); err == nil {
				t.Fatal("a failed client write is an error")
			}
		})

		t.Run(string(format)+"/oversize event", func(t *testing.T) {
			var client bytes.Buffer
			st, _ := NewStitcher(format, &client, Config{})
			st.events.Max = 64
			st.Write(first)
			if _, err := st.EndRound(); !errors.Is(err, ErrIncomplete) {
				t.Fatalf("EndRound: %v", err)
			}
		})
	}
	if _, err := NewStitcher("cohere_chat", &bytes.Buffer{}, Config{}); !errors.Is(err, ErrShape) {
		t.Fatalf("an unknown format is refused: %v", err)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// checkWellFormed checks a client stream's framing: one start, one end,
// every block or item closed, no trace of our tool.
func checkWellFormed(t *testing.T, format provider.Format, stream []byte) {
	t.Helper()
	if bytes.Contains(stream, []byte(ToolName)) {
		t.Fatalf("our tool in the client stream:\n%s", stream)
	}
	evs := clientEvents(t, stream)
	count := map[string]int{}
	open := map[int]bool{}
	for _, ev := range evs {
		count[ev.name]++
		switch ev.name {
		case "content_block_start":
			open[num(ev.data["index"])] = true
		case "content_block_stop":
			delete(open, num(ev.data["index"]))
		}
	}
	switch format {
	case provider.Chat:
		finishes := 0
		for _, ev := range evs[:len(evs)-1] {
			chs, _ := ev.data["choices"].([]any)
			for _, ch := range chs {
				if field(ch, "finish_reason") != nil {
					finishes++
				}
			}
		}
		if string(evs[len(evs)-1].raw) != "[DONE]" || finishes != 1 {
			t.Fatalf("%d finish chunks, last %q:\n%s", finishes, evs[len(evs)-1].raw, stream)
		}
	case provider.Anthropic:
		if count["message_start"] != 1 || count["message_delta"] != 1 || count["message_stop"] != 1 || evs[len(evs)-1].name != "message_stop" || len(open) != 0 {
			t.Fatalf("framing %v, open %v:\n%s", count, open, stream)
		}
	case provider.Responses:
		if count["response.created"] != 1 || count["response.completed"] != 1 || evs[len(evs)-1].name != "response.completed" {
			t.Fatalf("framing %v:\n%s", count, stream)
		}
		for i, ev := range evs {
			if num(ev.data["sequence_number"]) != i {
				t.Fatalf("sequence_number %v at %d", ev.data["sequence_number"], i)
			}
		}
	}
}

// TestStitcherNotAStream: an error answer in JSON (the provider refused the
// request) written into a Stitcher reaches the client byte for byte.
func TestStitcherNotAStream(t *testing.T) {
	bodies := []string{
		`{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too large"}}`,
		"{\n  \"error\": {\n    \"message\": \"Invalid 'input'\",\n    \"type\": \"invalid_request_error\"\n  }\n}\n",
	}
	for _, format := range allFormats {
		for _, body := range bodies {
			var client bytes.Buffer
			st, _ := NewStitcher(format, &client, Config{})
			st.Write([]byte(body))
			if _, err := st.EndRound(); !errors.Is(err, ErrIncomplete) {
				t.Fatalf("%s: %v", format, err)
			}
			st.Close()
			if client.String() != body {
				t.Fatalf("%s: client got %q, want %q", format, client.String(), body)
			}
		}
	}
}
