package caddymodule

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tokenterminator/caddy-token-terminator/compiler"
	"github.com/tokenterminator/caddy-token-terminator/tokens"
)

// Until the tokenizer tables are built the gate is told "budget" (logged
// once), models without a tokenizer are unaffected, and once warm the
// counter measures.
func TestWarmCounter(t *testing.T) {
	c, err := tokens.New(tokens.Config{Tokenizer: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	w := &warmCounter{counter: c, auto: true, log: zap.New(core)} // not warming yet
	ctx := context.Background()
	body := []byte(`{"model":"gpt-4o","messages":[]}`)
	for i := 0; i < 3; i++ {
		if st := w.Count(ctx, "gpt-4o", body).Status; st != compiler.TokensBudget {
			t.Fatalf("cold count: %s, want budget", st)
		}
	}
	if logs.Len() != 1 {
		t.Fatalf("%d cold log lines, want 1", logs.Len())
	}
	if st := w.Count(ctx, "claude-sonnet-4", body).Status; st != compiler.TokensNone {
		t.Fatalf("model without tokenizer: %s, want none", st)
	}
	go w.warm()
	deadline := time.Now().Add(30 * time.Second)
	for !w.ready.Load() {
		if time.Now().After(deadline) {
			t.Fatal("tables never became ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := w.Count(ctx, "gpt-4o", body).Status; !st.Measured() {
		t.Fatalf("warm count: %s", st)
	}
}
