package compiler

import (
	"context"
	"errors"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// The artifacts a rewrite names are written while the final gate counts
// tokens: neither needs the other's result (persist reads the plan's
// artifacts, the gate the two bodies), and a cold request's write spends
// much of its time waiting for the device's sync, which the count's CPU
// work can fill. What goes out is unchanged: the rewrite is returned only
// once persist has succeeded (invariant 4), and whatever the gate says,
// rewrite waits for the write to stop before it returns, so a compile has
// stopped (its scratch trees, which persist decodes from, released) when
// it returns.
//
// A rewrite the gate then refuses has had its write cancelled; what was
// already written stays, as any artifact of the tenant does until
// retention ages it out. That is harmless: it is content the tenant sent,
// filed under the tenant's own identities, counted against its quota, and
// no receipt or lineage record names it (record counts only what went
// out), so no conversation can reach it through a receipt it was not sent.

// pendingPersist is a persist running beside the gate.
type pendingPersist struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	took   time.Duration // persist's own time, for Result.Vault
}

// errPersistPanic reports a panic inside the overlapped persist: Compile's
// recover does not reach its goroutine.
var errPersistPanic = errors.New("compiler: persist panicked")

// startPersist starts persist for p. If it fails, stop is called (the gate's
// cancel: a count whose rewrite cannot go out is not worth finishing).
func (c *Compiler) startPersist(ctx context.Context, scope artifact.Scope, p *plan, stop context.CancelFunc) *pendingPersist {
	pctx, cancel := context.WithCancel(ctx)
	w := &pendingPersist{cancel: cancel, done: make(chan struct{})}
	go func() {
		tv := time.Now()
		defer func() {
			if r := recover(); r != nil {
				// The panic value is not reported: it may quote content.
				w.err = errPersistPanic
			}
			w.took = time.Since(tv)
			if w.err != nil {
				stop()
			}
			close(w.done)
		}()
		w.err = c.persist(pctx, scope, p)
	}()
	return w
}

// wait returns persist's error once it has stopped; with abandon (the gate
// refused the rewrite) it is cancelled first.
func (w *pendingPersist) wait(abandon bool) error {
	if abandon {
		w.cancel()
	}
	<-w.done
	w.cancel()
	return w.err
}

// gateAndPersist runs the final gate on out while the plan's artifacts are
// written (not in shadow mode, which stores nothing, nor for a rewrite the
// byte check already refuses). It returns what passed, or the reason the
// original goes instead: the gate's, else the write's.
func (c *Compiler) gateAndPersist(ctx context.Context, f format, p *plan, req Request, out []byte, res *Result) ([]byte, Reason) {
	var pending *pendingPersist
	gctx, stopGate := context.WithCancel(ctx)
	defer stopGate()
	if req.Mode != ModeShadow && len(out) < len(req.Body) {
		pending = c.startPersist(ctx, req.Scope, p, stopGate)
		defer func() {
			if r := recover(); r != nil {
				// The gate panicked: the write stops before Compile's
				// recover releases the trees it may decode from.
				pending.wait(true)
				panic(r)
			}
		}()
	}
	tg := time.Now()
	out, reason := c.gateWorkingState(gctx, f, p, req.Body, out, res)
	res.Gate = time.Since(tg)
	if pending != nil {
		// cut: the write failed while the gate ran and stopped it, so the
		// gate's verdict is not one (a count cut short reports "budget").
		cut := gctx.Err() != nil && ctx.Err() == nil
		err := pending.wait(reason != "" && !cut)
		res.Vault += pending.took
		if err != nil && (reason == "" || cut) {
			// Nothing is lost: without its artifacts durable and read
			// back, no receipt goes out.
			res.Detail = err.Error()
			if errors.Is(err, errPersistPanic) {
				return nil, ReasonPanic
			}
			return nil, vaultReason(ctx, err)
		}
	}
	if reason != "" {
		return nil, reason
	}
	if ctx.Err() != nil {
		return nil, ReasonTimeout
	}
	return out, ""
}
