package caddymodule

import (
	"context"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/compiler"
	"github.com/tokenterminator/caddy-token-terminator/tokens"
)

// warmCounter is a token counter whose tokenizer tables are built in the
// background when it is created (each encoding takes 0.1-0.3 s, once per
// process), so no request pays for them. Until they are ready the gate
// behaves as past its budget and says so: the token veto is skipped and the
// header reads tokens=budget. The App keeps one per configuration across
// reloads, so a reload never goes cold again.
type warmCounter struct {
	counter  *tokens.Counter
	auto     bool // tokenizer auto: models without a tokenizer are not affected
	ready    atomic.Bool
	coldSeen atomic.Bool
	log      *zap.Logger
}

var _ compiler.HintedCounter = (*warmCounter)(nil)

func newWarmCounter(c *tokens.Counter, tokenizer string, log *zap.Logger) *warmCounter {
	w := &warmCounter{counter: c, auto: tokenizer == "auto", log: log}
	if tokenizer == "off" {
		w.ready.Store(true)
		return w
	}
	go w.warm()
	return w
}

// warm builds the tables by counting a tiny body per encoding.
func (w *warmCounter) warm() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	for _, model := range []string{"gpt-4o", "gpt-4"} { // o200k_base, cl100k_base
		for ctx.Err() == nil && !w.counter.Count(ctx, model, []byte(`{"model":"`+model+`"}`)).Status.Measured() {
			// The first count may give up at its budget while the table
			// is still being built; the build goes on, so ask again.
			time.Sleep(10 * time.Millisecond)
		}
	}
	w.ready.Store(true)
	if w.coldSeen.Load() {
		w.log.Info("tokenizer tables ready; the token gate applies again", zap.Duration("build", time.Since(start)))
	}
}

// Count implements compiler.TokenCounter.
func (w *warmCounter) Count(ctx context.Context, model string, body []byte) compiler.TokenCount {
	return w.CountHinted(ctx, model, body, nil)
}

// CountHinted implements compiler.HintedCounter: the compiler's message
// starts reach the counter, so a resent history is counted by lookups.
func (w *warmCounter) CountHinted(ctx context.Context, model string, body []byte, hints []int) compiler.TokenCount {
	if w.ready.Load() || (w.auto && tokens.EncodingFor(model) == "") {
		return w.counter.CountHinted(ctx, model, body, hints)
	}
	if !w.coldSeen.Swap(true) {
		w.log.Info("tokenizer tables are still being built; until they are ready the token veto is skipped (tokens=budget)")
	}
	return compiler.TokenCount{Status: compiler.TokensBudget}
}
