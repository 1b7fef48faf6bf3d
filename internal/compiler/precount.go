package compiler

import (
	"context"
	"sync/atomic"
)

// A tool result is first sent inline (the model has not read it yet):
// that request has nothing to replace and goes out as it came, without a
// token count. The next request of the conversation, sent once the model
// has answered, receipts the result, and its gate must count the original
// body: without help, every new result's megabyte is tokenized on that
// request's critical path. So a request that had eligible results but
// nothing to replace has its body counted in the background after Compile
// returns, by message (the gate's hints): the counter caches each message's
// count, and the next request, which resends those messages byte for byte,
// finds them cached. It is work that request would do anyway, done while
// the provider answers instead of while the client waits.
//
// It is bounded: one background count per Compiler at a time (another
// request with nothing to replace meanwhile is not counted; its next
// request counts what it must), each within the compile timeout and the
// counter's own budget. It reads the body under the request's hold (or a
// copy when the request has none), so the gateway's buffer is not reused
// under it.

// precounting is 1 while a background count runs.
type precounting = atomic.Bool

// precount starts the background count of d's original body (req.Body) for model,
// unless one is running, there is no tokenizer, or nothing was eligible.
func (c *Compiler) precount(d *doc, model string, req Request) {
	if c.tokens == nil || !c.precounting.CompareAndSwap(false, true) {
		return
	}
	hints, _ := tokenHints(d, nil)
	body, release := heldBody(req)
	if body == nil {
		c.precounting.Store(false)
		return
	}
	go func() {
		defer c.precounting.Store(false)
		defer release()
		defer func() { _ = recover() }() // a failed count only loses the head start
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
		defer cancel()
		countHinted(ctx, c.tokens, model, body, hints, req.Hold)
	}()
}
