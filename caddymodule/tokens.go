package caddymodule

import (
	"fmt"

	"github.com/tokenterminator/caddy-token-terminator/internal/tokens"
)

// Token counters are shared through the App's pool across reloads. The
// tokenizer tables are built once per process, synchronously, by the first
// tokens.New (at provision, never on a request), so the first counted
// request is no slower than any cold one. The pooled counter holds the
// count caches and the work in flight; its key leaves out the budget, and
// each handler counts through a view with its own (Counter.WithBudget), so
// a reload that changes token_budget keeps everything counted so far.

type counterHandle struct{ counter *tokens.Counter }

func (counterHandle) Destruct() error { return nil }

// countersKey names the pooled counter of cfg: the tokenizer and the cache
// size, never the budget.
func countersKey(cfg tokens.Config) string {
	return fmt.Sprintf("%s|%d", cfg.Tokenizer, cfg.CacheBytes)
}
