package compiler

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
)

// The write counterpart of precount.go: a request with eligible results
// but nothing to replace forwards them inline, and the next request of its
// conversation, once the model has answered, receipts them and must first
// make them durable (decode, encode, seal, write, sync, read back) while
// its client waits. So such a request's eligible results are written in
// the background after Compile returns, through the same Store.Missing and
// Store.Persist as a rewrite's (identity checked, synced, read back); the
// next request's persist then finds them stored and writes nothing.
//
// It changes nothing that goes out: receipts still go out only after their
// own request's persist has confirmed the content durable and readable
// (invariant 4); a background write that fails or is still running is
// found missing or pending there and written or awaited as before. What it
// writes is content the tenant sent, under the tenant's own identities
// (Request.KeyID, the context's data keys), counted against its quota, and
// named by no receipt until a request forwards one; a result never
// receipted ages out with retention. Only enforce mode writes (shadow
// stores nothing), only string results (whose text is their raw value's
// decoding; text parts are left to their rewrite), one background write
// per Compiler at a time, within the compile timeout.

// prestoring is true while a background write runs.
type prestoring = atomic.Bool

// prestoreSlot is an eligible string result to write: its raw value's
// span in the body and whether the span is inside the string (a wrapped
// body: no quotes to strip before decoding).
type prestoreSlot struct {
	a          artifact.Artifact // without Text and Raw
	start, end int
	inner      bool
}

// prestore starts the background write of p's eligible string results the
// store does not have.
func (c *Compiler) prestore(ctx context.Context, req Request, p *plan) {
	if req.Mode != ModeEnforce || !c.prestoring.CompareAndSwap(false, true) {
		return
	}
	todo := prestoreSlots(p)
	body, release := heldBody(req)
	if len(todo) == 0 || body == nil {
		release()
		c.prestoring.Store(false)
		return
	}
	// The context's values (the tenant's data keys) without its deadline:
	// the request goes on without waiting for this.
	bctx := context.WithoutCancel(ctx)
	go func() {
		defer c.prestoring.Store(false)
		defer release()
		defer func() { _ = recover() }() // a failed write only loses the head start
		ctx, cancel := context.WithTimeout(bctx, c.opts.Timeout)
		defer cancel()
		_ = c.storeSlots(ctx, req.Scope, body, todo)
	}()
}

// prestoreSlots lists p's eligible string results once per digest. Tool
// and arguments are copied: they may view the request's buffer.
func prestoreSlots(p *plan) []prestoreSlot {
	var out []prestoreSlot
	seen := map[artifact.Digest]bool{}
	for i, s := range p.d.slots {
		if !p.eligible[i] || seen[s.text.digest] || !s.value.Is(jsonv.String) {
			continue
		}
		seen[s.text.digest] = true
		a := artifact.Artifact{Digest: s.text.digest, Tool: strings.Clone(s.tool), Args: strings.Clone(s.args), Chars: s.text.chars}
		out = append(out, prestoreSlot{a: a, start: s.start, end: s.end, inner: s.inner})
	}
	return out
}

// heldBody returns the request's body for a reader that outlives Compile:
// the body itself under its hold, or a copy when the request has no hold;
// nil when the hold has already gone.
func heldBody(req Request) (body []byte, release func()) {
	if req.Hold == nil {
		return append([]byte(nil), req.Body...), func() {}
	}
	if r, ok := req.Hold(); ok {
		return req.Body, r
	}
	return nil, func() {}
}

// storeSlots writes the slots of body that scope's store is missing.
func (c *Compiler) storeSlots(ctx context.Context, scope artifact.Scope, body []byte, todo []prestoreSlot) error {
	digests := make([]artifact.Digest, len(todo))
	for i, s := range todo {
		digests[i] = s.a.Digest
	}
	want, err := c.missing(ctx, scope, digests)
	if err != nil || len(want) == 0 {
		return err
	}
	arts := make([]artifact.Artifact, 0, len(want))
	for _, s := range todo {
		if !want[s.a.Digest] {
			continue
		}
		a := s.a
		a.Raw = body[s.start:s.end]
		content := a.Raw
		if !s.inner {
			content = content[1 : len(content)-1] // the quotes
		}
		a.Text = string(jsonv.AppendUnquoted(nil, content))
		arts = append(arts, a)
	}
	return c.store.Persist(ctx, scope, arts)
}
