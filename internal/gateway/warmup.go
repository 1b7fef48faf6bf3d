package gateway

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// The warm-up conversation: warmUpResults tool results of warmUpChars each,
// generated, so it says nothing about any tenant's content. It is small
// (a few milliseconds of compile) so that it is over before a request
// that follows a start closely: it is there to run every part of the
// compile once, not to fill caches.
const (
	warmUpResults = 12
	warmUpChars   = 20000
	warmUpPath    = "/v1/chat/completions"
	// warmUpTenant is the scope of the warm-up compiles: a real tenant is
	// the hex of a keyed hash, which never contains '~'.
	warmUpTenant = "~warm-up"
	// warmUpYieldBytes is the smallest client body whose compile stops
	// the warm-up. Smaller ones (a client's probe, a short first turn)
	// compile in well under a millisecond and pay little of what the
	// warm-up pays for (the heap's growth, the first large parse, count
	// and gate); stopping for them left a process that is probed at start
	// as cold as one with no warm-up.
	warmUpYieldBytes = 64 << 10
)

// WarmUp has compile, a compiler of the gateway's options and token
// counter over a store of its own that is thrown away afterwards, compile a
// generated agent conversation: the request that delivers its tool results
// and the next one, which turns them into receipts. A freshly started
// process then pays its first-use costs (the heap growing to a large
// compile's size, the token tables' first counts, the compiler's first
// parse, persist and rewrite) before its first client request does,
// instead of during it. The gateway's own compiler and vault are never
// called, so no tenant state is written; the content is generated, and its
// scope a tenant no credential can name. It is bounded as a request is: a
// compile slot, its body's share of max_buffered_bytes, compile_timeout per
// compile, and a panic is recovered; it stops once a client compile of a
// large body (warmUpYieldBytes) has begun. It reports whether the conversation
// compiled to receipts; callers run it in a goroutine of its own, so it
// never delays a start or a reload.
func (g *Gateway) WarmUp(ctx context.Context, compile CompileFunc) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			g.Logger.Warn("warm-up compile panicked; requests are unaffected", zap.String("panic_type", fmt.Sprintf("%T", v)))
			ok = false
		}
	}()
	if compile == nil || g.VaultErr != "" || g.Mode == compiler.ModeOff {
		return false
	}
	prev, body := warmUpBodies(g.MaxBodySize)
	if body == nil || !g.holdWarmUp(int64(len(body))) {
		return false
	}
	defer g.Buffered.Add(-int64(len(body)))
	start := time.Now()
	w := &Gateway{Config: g.Config, Logger: g.Logger, Compile: compile, Slots: g.Slots}
	// Once a large client compile has begun, it warms the process itself:
	// the warm-up would only compete with it for the CPU.
	if g.served.Load() {
		return false
	}
	res, done := w.warmUpCompile(ctx, prev)
	if !done || res.Commit == nil || g.served.Load() {
		return false
	}
	res.Commit() // into the throwaway store
	res, done = w.warmUpCompile(ctx, body)
	ok = done && res.Decision == compiler.Accepted && res.Receipts > 0
	g.Logger.Info("warm-up compile done", zap.Bool("compiled", ok), zap.String("decision", string(res.Decision)),
		zap.String("reason", string(res.Reason)), zap.Int("raw_bytes", len(body)), zap.Int("receipts", res.Receipts),
		zap.Float64("ms", float64(time.Since(start).Microseconds())/1000))
	return ok
}

// warmUpCompile compiles body in a compile slot, under compile_timeout;
// done is false when it got no slot or did not finish in time.
func (g *Gateway) warmUpCompile(ctx context.Context, body []byte) (compiler.Result, bool) {
	ctx, cancel := context.WithTimeout(ctx, g.CompileTimeout)
	defer cancel()
	slot, got := g.Slots.acquire(ctx)
	if !got {
		return compiler.Result{}, false
	}
	stopped := sync.OnceFunc(slot) // returned when the compile stops, as a request's
	res := g.compile(ctx, compiler.Request{
		Path:        warmUpPath,
		Body:        body,
		Scope:       artifact.Scope{Tenant: warmUpTenant},
		Mode:        compiler.ModeEnforce,
		DeferCommit: true,
		Done:        stopped,
	})
	if res.Reason != compiler.ReasonTimeout {
		stopped()
	}
	return res, res.Reason != compiler.ReasonTimeout && res.Reason != compiler.ReasonPanic
}

// yieldWarmUp stops the warm-up once a client compile of n body bytes
// begins, when n is large enough to be worth the CPU (warmUpYieldBytes).
func (g *Gateway) yieldWarmUp(n int) {
	if n >= warmUpYieldBytes && !g.served.Load() {
		g.served.Store(true)
	}
}

// holdWarmUp counts n bytes in max_buffered_bytes, if they fit.
func (g *Gateway) holdWarmUp(n int64) bool {
	if g.Buffered == nil {
		return false
	}
	if g.Buffered.Add(n) > g.MaxBufferedBytes {
		g.Buffered.Add(-n)
		return false
	}
	return true
}

// warmUpBodies are the warm-up conversation's two requests, with as many
// results as fit in maxBody; nil when not even one does.
func warmUpBodies(maxBody int64) (prev, body []byte) {
	n := min(warmUpResults, int(maxBody/(warmUpChars+warmUpChars/4))-1)
	if n < 1 {
		return nil, nil
	}
	turns := fixtures.NovelTurns(1, 1, n+1, warmUpChars)
	return fixtures.ChatBody("gpt-4o", turns[:n], ""), fixtures.ChatBody("gpt-4o", turns, "")
}
