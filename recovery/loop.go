package recovery

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/tokenterminator/caddy-token-terminator/response"
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
// number of follow-ups sent. It never fails the client: on any error it
// returns the last answer it has, stripped when possible, and the error
// for the log.
func LoopJSON(ctx context.Context, cfg Config, arts Artifacts, tenant, format string, request, answer []byte, maxAnswer int, send Sender) ([]byte, int, error) {
	cfg = cfg.WithDefaults()
	var usage response.Usage
	var err error
	round := 0
	for ; ; round++ {
		r := response.NewReader(format, response.Options{Keep: []string{ToolName}, MaxBody: max(maxAnswer, len(answer))})
		r.Write(answer)
		usage = usage.Add(r.Usage())
		calls := OwnCalls(r.ToolCalls())
		if len(calls) == 0 && round == 0 {
			return answer, 0, nil // the common case: nothing of ours, not a byte changed
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

// LoopStream runs the recovery loop for a streamed answer: first is the
// provider's stream for request, client where the client's stream goes.
// Client-visible events are written as they arrive; follow-ups are sent
// while the model calls the gateway's tool and rounds remain. Whatever
// fails, the client stream is finished well formed from the last complete
// round. It returns the number of follow-ups sent and the first error.
func LoopStream(ctx context.Context, cfg Config, arts Artifacts, tenant, format string, request []byte, first io.Reader, client io.Writer, send Sender) (int, error) {
	cfg = cfg.WithDefaults()
	st, err := NewStitcher(format, client, cfg)
	if err != nil {
		// Not a format we stitch: pass the stream through as it is.
		_, cerr := io.Copy(client, first)
		return 0, errors.Join(err, cerr)
	}
	stream := first
	for rounds := 0; ; rounds++ {
		if _, err := io.Copy(st, stream); err != nil {
			st.Close()
			return rounds, fmt.Errorf("recovery: stream: %w", err)
		}
		r, err := st.EndRound()
		if err != nil || !r.Continue {
			if cerr := st.Close(); err == nil {
				err = cerr
			}
			return rounds, err
		}
		Run(ctx, cfg, arts, tenant, r.Calls)
		next, err := FollowUp(format, request, r.Answer, r.Calls)
		if err != nil {
			return rounds, errors.Join(err, st.Close())
		}
		rc, err := send(ctx, next)
		if err != nil {
			return rounds, errors.Join(err, st.Close())
		}
		request, stream = next, rc
		defer rc.Close()
	}
}
