package recovery

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
)

// Sender sends one follow-up request of the loop upstream (same path and
// headers as the client's request, this body) and returns the answer's
// body; a status other than success is an error. The glue implements it
// around the next handler.
type Sender func(ctx context.Context, body []byte) (io.ReadCloser, error)

// ErrAnswerTooLarge means a buffered follow-up answer exceeded its bound.
var ErrAnswerTooLarge = errors.New("recovery: answer too large to buffer")

// LoopJSON runs the recovery loop for a non-streaming answer: while the
// model calls the gateway's tool (and rounds remain), it answers the calls,
// sends the follow-up and reads the next answer (at most maxAnswer bytes).
// request is the body that produced answer. It returns the answer the
// client gets (our calls removed, usage summed over the rounds) and the
// number of follow-ups sent. The client never sees the gateway's tool, not
// even in the tools a Responses answer echoes. It never fails the client: on any error it
// returns the last answer it has, stripped when possible, and the error
// for the log.
func LoopJSON(ctx context.Context, cfg Config, arts Artifacts, tenant string, format provider.Format, request, answer []byte, maxAnswer int, send Sender) ([]byte, int, error) {
	cfg = cfg.WithDefaults()
	var usage provider.Usage
	var err error
	round := 0
	for ; ; round++ {
		r := response.NewReader(format, response.Options{Keep: []string{ToolName}, MaxBody: max(maxAnswer, len(answer))})
		r.Write(answer)
		usage = usage.Add(r.Usage())
		calls := OwnCalls(r.ToolCalls())
		if len(calls) == 0 && round == 0 {
			// The common case: nothing of ours, not a byte changed but the
			// tool a Responses answer echoes.
			return StripToolEcho(format, answer), 0, nil
		}
		if len(calls) == 0 || round == cfg.MaxRounds {
			break
		}
		Run(ctx, cfg, arts, tenant, calls)
		var next, nextAnswer []byte
		if next, err = FollowUp(format, request, answer, calls); err != nil {
			break
		}
		if nextAnswer, err = readAnswer(ctx, send, next, maxAnswer); err != nil {
			break
		}
		request, answer = next, nextAnswer
	}
	final, serr := StripOwnCalls(format, answer, usage)
	if serr != nil {
		return answer, round, errors.Join(err, serr)
	}
	return final, round, err
}

func readAnswer(ctx context.Context, send Sender, body []byte, maxAnswer int) ([]byte, error) {
	rc, err := send(ctx, body)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, int64(maxAnswer)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxAnswer {
		return nil, ErrAnswerTooLarge
	}
	return b, nil
}

// StreamSender sends one follow-up request upstream and writes the
// answer's body (the provider's SSE stream) to w as it arrives; a status
// other than success is an error, with nothing written. In Caddy it is
// next.ServeHTTP with a ResponseWriter whose body writes go to w.
type StreamSender func(ctx context.Context, body []byte, w io.Writer) error

// Continue runs the recovery loop for a streamed answer whose first round
// (the answer to request) has been written into s: while the model calls
// the gateway's tool and rounds remain, it answers the calls and streams
// the follow-up's answer into s. Whatever fails, the client stream is
// finished well formed from the last complete round. It returns the number
// of follow-ups sent and the first error.
func (s *Stitcher) Continue(ctx context.Context, arts Artifacts, tenant string, request []byte, send StreamSender) (int, error) {
	for rounds := 0; ; rounds++ {
		r, err := s.EndRound()
		if err != nil || !r.Continue {
			if cerr := s.Close(); err == nil {
				err = cerr
			}
			return rounds, err
		}
		Run(ctx, s.cfg, arts, tenant, r.Calls)
		next, err := FollowUp(s.format, request, r.Answer, r.Calls)
		if err != nil {
			return rounds, errors.Join(err, s.Close())
		}
		if err := send(ctx, next, s); err != nil {
			return rounds + 1, errors.Join(fmt.Errorf("recovery: follow-up: %w", err), s.Close())
		}
		request = next
	}
}

// LoopStream is Continue for a glue that holds the first answer as a
// reader and sends follow-ups with a Sender: it streams first into a new
// Stitcher writing to client, then continues. A format the stitcher does
// not know is copied through untouched.
func LoopStream(ctx context.Context, cfg Config, arts Artifacts, tenant string, format provider.Format, request []byte, first io.Reader, client io.Writer, send Sender) (int, error) {
	st, err := NewStitcher(format, client, cfg)
	if err != nil {
		_, cerr := io.Copy(client, first)
		return 0, errors.Join(err, cerr)
	}
	if _, err := io.Copy(st, first); err != nil {
		return 0, errors.Join(fmt.Errorf("recovery: stream: %w", err), st.Close())
	}
	return st.Continue(ctx, arts, tenant, request, func(ctx context.Context, body []byte, w io.Writer) error {
		rc, err := send(ctx, body)
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.Copy(w, rc)
		return err
	})
}
