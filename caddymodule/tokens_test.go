package caddymodule

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/tokens"
)

// A reload that changes only token_budget keeps the pooled counter (its
// caches and work in flight): configurations that differ in the budget
// share one, and each counts with its own budget.
func TestCounterSharedAcrossBudgets(t *testing.T) {
	app, _ := newApp(t)
	long := tokens.Config{Tokenizer: "auto", Budget: time.Minute}
	short := tokens.Config{Tokenizer: "auto", Budget: time.Nanosecond}
	cl, releaseLong, err := app.counter(long)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseLong()
	cs, releaseShort, err := app.counter(short)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := app.shared.counters.References(countersKey(long)); n != 2 {
		t.Fatalf("the two budgets hold %d references to one counter, want 2", n)
	}
	other := tokens.Config{Tokenizer: "auto", CacheBytes: 1 << 20, Budget: time.Minute}
	_, releaseOther, err := app.counter(other)
	if err != nil {
		t.Fatal(err)
	}
	releaseOther()
	if countersKey(other) == countersKey(long) {
		t.Fatal("another cache size shares the counter")
	}

	body := []byte(`{"model":"gpt-4o","messages":[{"role":"tool","content":"` + strings.Repeat("line of tool output 12345\\n", 20000) + `"}]}`)
	ctx := context.Background()
	if st := cs.Count(ctx, "gpt-4o", body).Status; st != artifact.TokensBudget {
		t.Fatalf("cold body with a 1ns budget: %s", st)
	}
	want := cl.Count(ctx, "gpt-4o", body)
	if want.Status != artifact.TokensExact {
		t.Fatalf("one minute budget: %+v", want)
	}
	if got := cs.Count(ctx, "gpt-4o", body); got != want {
		t.Fatalf("1ns budget after the other counted it: %+v, want %+v from the shared cache", got, want)
	}
	releaseShort()
	if n, _ := app.shared.counters.References(countersKey(long)); n != 1 {
		t.Fatalf("%d references after one release, want 1", n)
	}
}

// A negative budget is refused even when the counter already exists.
func TestCounterNegativeBudget(t *testing.T) {
	app, _ := newApp(t)
	_, release, err := app.counter(tokens.Config{Tokenizer: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, _, err := app.counter(tokens.Config{Tokenizer: "auto", Budget: -time.Second}); err == nil || !strings.Contains(err.Error(), "-1s") {
		t.Fatalf("negative budget: %v", err)
	}
	if n, _ := app.shared.counters.References(countersKey(tokens.Config{Tokenizer: "auto"})); n != 1 {
		t.Fatalf("%d references after the refused one, want 1", n)
	}
}
