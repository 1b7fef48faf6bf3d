package recovery

import (
	"bytes"
	"context"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery/recoverytest"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
)

// fakeSender answers follow-ups with the scripted model; failAt makes the
// n-th follow-up (1-based) fail.
func fakeSender(t *testing.T, m recoverytest.Model, stream bool, failAt int) (Sender, *int) {
	sent := 0
	return func(_ context.Context, body []byte) (io.ReadCloser, error) {
		sent++
		if sent == failAt {
			return nil, errors.New("upstream: 529 overloaded")
		}
		turn, err := m.Answer(body)
		if err != nil {
			t.Fatalf("follow-up %d refused: %v\n%s", sent, err, body)
		}
		if stream {
			return io.NopCloser(bytes.NewReader(turn.Stream(m.Format, sent))), nil
		}
		return io.NopCloser(bytes.NewReader(turn.Body(m.Format, sent))), nil
	}, &sent
}

// TestLoopHelpers: LoopJSON and LoopStream run the loop of TestLoopJSON and
// TestLoopStream and give the client what those checked; a failing
// follow-up still leaves the client a whole answer without our calls.
func TestLoopHelpers(t *testing.T) {
	ctx := context.Background()
	for _, c := range loopCases(allFormats...) {
		t.Run(c.String(), func(t *testing.T) {
			mem, model, body := setupLoop(t, c)
			texts, wantUsage, wantCalls := c.expect(Config{}, model)
			first, _ := model.Answer(body)

			send, sent := fakeSender(t, model, false, 0)
			final, rounds, err := LoopJSON(ctx, Config{}, mem, loopTenant, c.format, body, first.Body(c.format, 0), 1<<20, send)
			if err != nil || rounds != *sent || rounds != min(c.rounds, DefaultMaxRounds) {
				t.Fatalf("LoopJSON: %v, %d rounds, %d sent", err, rounds, *sent)
			}
			if got := answerText(c.format, final); got != texts[len(texts)-1] {
				t.Fatalf("LoopJSON text %q", got)
			}
			// Nothing of ours called: the answer as sent but for the tools a
			// Responses answer echoes, which are the client's own.
			if c.rounds == 0 && !bytes.Equal(final, first.Echo([]byte(requests[c.format])).Body(c.format, 0)) {
				t.Fatalf("LoopJSON changed an answer that called nothing of ours beyond the echo of our tool:\n%s", final)
			}
			checkAnswer(t, c, final, false, &wantUsage, wantCalls)

			send, _ = fakeSender(t, model, true, 0)
			var client bytes.Buffer
			rounds, err = LoopStream(ctx, Config{}, mem, loopTenant, c.format, body, bytes.NewReader(first.Stream(c.format, 0)), &client, send)
			if err != nil || rounds != min(c.rounds, DefaultMaxRounds) {
				t.Fatalf("LoopStream: %v, %d rounds", err, rounds)
			}
			checkAnswer(t, c, client.Bytes(), true, &wantUsage, wantCalls)
			checkClientStream(t, c, client.Bytes(), texts)

			if c.rounds < 2 {
				return
			}
			// The second follow-up fails.
			send, _ = fakeSender(t, model, false, 2)
			final, rounds, err = LoopJSON(ctx, Config{}, mem, loopTenant, c.format, body, first.Body(c.format, 0), 1<<20, send)
			if err == nil || rounds != 1 || final == nil {
				t.Fatalf("LoopJSON with a failing follow-up: %v, %d rounds", err, rounds)
			}
			checkAnswer(t, c, final, false, nil, nil)
			send, _ = fakeSender(t, model, true, 2)
			client.Reset()
			if _, err := LoopStream(ctx, Config{}, mem, loopTenant, c.format, body, bytes.NewReader(first.Stream(c.format, 0)), &client, send); err == nil {
				t.Fatal("LoopStream hides the failure")
			}
			checkWellFormed(t, c.format, client.Bytes())
		})
	}
}

// checkAnswer reads what the client got: never a call of ours; with usage
// given, that usage summed and exactly the client calls wanted.
func checkAnswer(t *testing.T, c loopCase, body []byte, stream bool, usage *provider.Usage, calls []string) {
	t.Helper()
	if bytes.Contains(body, []byte(ToolName)) {
		t.Fatalf("the client sees the gateway's tool:\n%s", body)
	}
	r := response.NewReader(c.format, response.Options{Stream: stream})
	r.Write(body)
	got := callIDs(r.ToolCalls())
	for _, id := range got {
		if len(id) > 4 && id[:4] == "OWN:" {
			t.Fatalf("our call reached the client: %v", got)
		}
	}
	if usage == nil {
		return
	}
	if u := sums(r.Usage()); u != openAIUsage(c.format, *usage) {
		t.Fatalf("usage %+v, want %+v", u, *usage)
	}
	if !reflect.DeepEqual(got, calls) {
		t.Fatalf("client calls %v, want %v", got, calls)
	}
}

// TestStitcherContinue drives the Caddy-shaped seam: the first answer is
// written into the Stitcher, follow-ups stream into it through a
// StreamSender.
func TestStitcherContinue(t *testing.T) {
	ctx := context.Background()
	for _, c := range loopCases(allFormats...) {
		t.Run(c.String(), func(t *testing.T) {
			mem, model, body := setupLoop(t, c)
			texts, wantUsage, wantCalls := c.expect(Config{}, model)
			var client bytes.Buffer
			st, err := NewStitcher(c.format, &client, Config{})
			if err != nil {
				t.Fatal(err)
			}
			first, _ := model.Answer(body)
			st.Write(first.Stream(c.format, 0))
			sent := 0
			rounds, err := st.Continue(ctx, mem, loopTenant, body, func(_ context.Context, next []byte, w io.Writer) error {
				sent++
				turn, err := model.Answer(next)
				if err != nil {
					t.Fatalf("follow-up refused: %v", err)
				}
				_, err = w.Write(turn.Stream(c.format, sent))
				return err
			})
			if err != nil || rounds != sent || rounds != min(c.rounds, DefaultMaxRounds) {
				t.Fatalf("Continue: %v, %d rounds, %d sent", err, rounds, sent)
			}
			checkAnswer(t, c, client.Bytes(), true, &wantUsage, wantCalls)
			checkClientStream(t, c, client.Bytes(), texts)
		})
	}
}

// sums is a usage without the model the answer names (the response
// reader's tests check that): the token sums are what these tests check.
func sums(u provider.Usage) provider.Usage {
	u.Model = ""
	return u
}
