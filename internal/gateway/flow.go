package gateway

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/seal"
)

// exchange is one candidate request on its way through the gateway.
type exchange struct {
	start  time.Time
	out    outcome           // the one record of what happened (outcome.go)
	commit func()            // lineage record, run once the provider accepted the body
	body   *bodyBuffer       // the client's body read whole (bodybuf.go); nil when not read
	rec    *recoveryExchange // set when the forwarded body carries the recovery tool
	held   *heldBytes        // the recovery loop's buffers in max_buffered_bytes (recovery.go)
	// promised keeps the promise of the lineage record made when a whole
	// answer of declared length was seen (pending.go); nil when none was.
	promised func()
	// committing is closed when the lineage write behind a whole answer
	// ends (commitBehind); nil when none was started.
	committing chan struct{}
	// observe hands the provider's usage for this request to the compiler
	// (cost calibration); nil when the request was not compiled.
	observe  func(provider.Usage)
	observed bool // observe was called
	// The request's tenant as the verified set saw it (verified.go), for
	// the provider's answer to settle; tenant is "" without one.
	gate struct {
		tenant   string
		verified bool
		reason   compiler.Reason
	}
}

func newExchange(format provider.Format, r *http.Request) *exchange {
	return &exchange{start: time.Now(), out: outcome{format: format, path: r.URL.Path, rawBytes: r.ContentLength, sentBytes: r.ContentLength}}
}

// bypass forwards a request the client asked to go upstream untouched.
func (g *Gateway) bypass(r *http.Request, ex *exchange) {
	ex.out.passthrough(ReasonBypass)
	if g.Tenants == nil || g.VaultErr != "" {
		return
	}
	if t := g.tenant(r, ex.out.format); t != "" {
		// For the ledger's per-tenant figures: a verified tenant only.
		if ok, _, _ := g.verifiedTenant(r, ex, t); ok {
			ex.out.tenant = t
		}
	}
}

// verifiedTenant reports whether tenant may use vault state, and notes it
// in ex for the answer to verify or revoke. Without a gate (a gateway
// built in a test without a vault) every tenant may.
func (g *Gateway) verifiedTenant(r *http.Request, ex *exchange, tenant string) (bool, compiler.Reason, string) {
	if g.Gate == nil {
		return true, "", ""
	}
	ok, reason, detail := g.Gate.check(r.Context(), tenant)
	ex.gate.tenant, ex.gate.verified, ex.gate.reason = tenant, ok, reason
	return ok, reason, detail
}

// candidate is a body read whole, on its way to the compiler or past it.
type candidate struct {
	buf      []byte // the body the compiler reads (decoded, if it was encoded)
	wire     []byte // the body as the client sent it (encoding.go)
	coding   string // its Content-Encoding, "" for none
	tenant   string
	reserved *reservation
	release  func()        // the body's share of max_buffered_bytes, due when the upstream is done
	keyed    bool          // the request carries its tenant's data keys (seal.go)
	mode     compiler.Mode // the tenant's mode (its label's, else the gateway's; holdout.go)
}

// prepare reads the body, compiles it and sets what goes upstream. It
// returns the release of the body's share of max_buffered_bytes, due when
// the upstream is done with the body.
func (g *Gateway) prepare(r *http.Request, ex *exchange) (release func()) {
	if reason, ok := g.refuseUnread(r); !ok {
		ex.out.passthrough(reason)
		return func() {}
	}
	tenant, unverified, detail := g.admitTenant(r, ex)
	buf, reason, reserved := g.readBody(r, ex, tenant != "")
	coding, _ := requestCoding(r) // refuseUnread let only a known one through
	c := &candidate{buf: buf, wire: buf, coding: coding, tenant: tenant, reserved: reserved, release: reserved.release, keyed: seal.FromContext(r.Context()) != nil}
	if o := ex.body; o != nil {
		c.release = func() { reserved.release(); o.release() } // the gateway's own reference
	}
	if reason != "" {
		reserved.endWork()
		ex.out.passthrough(reason)
		return c.release
	}
	if unverified == "" {
		unverified, detail = g.refuseCompile(c)
	}
	if unverified != "" {
		return g.passOn(r, ex, c, unverified, detail)
	}
	return g.compileCandidate(r, ex, c)
}

// admitTenant is the request's tenant, known before the body is read: a
// candidate without a vault or a tenant is only forwarded, and its body
// reserves no working memory. A tenant the provider has not accepted yet
// gets no state: its request is only forwarded (the reason says why), and
// the answer may verify it.
func (g *Gateway) admitTenant(r *http.Request, ex *exchange) (tenant string, unverified compiler.Reason, detail string) {
	if g.VaultErr != "" {
		return "", "", ""
	}
	tenant = g.tenant(r, ex.out.format) // the tenant hasher exists only with a vault
	if tenant == "" {
		return "", "", ""
	}
	if ok, why, detail := g.verifiedTenant(r, ex, tenant); !ok {
		return "", why, detail
	}
	return tenant, "", ""
}

// refuseCompile is why a whole body is forwarded uncompiled, "" when it
// may compile; its working memory is reserved then, before the wait for
// a slot (admission.go).
func (g *Gateway) refuseCompile(c *candidate) (compiler.Reason, string) {
	switch {
	case g.VaultErr != "":
		return compiler.ReasonVaultError, g.VaultErr
	case c.tenant == "" && g.TenantKeyPending != nil && g.TenantKeyPending():
		return compiler.ReasonVaultError, "the vault's tenant key is not readable yet"
	case c.tenant == "":
		// No credential and no configured identity: no cross-request state.
		return ReasonNoTenant, ""
	case g.encrypting() && !c.keyed:
		// Nothing is ever stored in plain text while encrypt is on.
		return compiler.ReasonVaultError, "the request's data keys could not be derived"
	}
	if c.coding != "" {
		dec, err := decodeBody(c.coding, c.wire, g.MaxBodySize)
		if err != nil {
			return ReasonContentEncoding, err.Error()
		}
		c.buf = dec
	}
	if !c.reserved.admitWork(len(c.buf)) {
		return ReasonBusy, "no room in max_buffered_bytes for the compile's working memory"
	}
	return "", ""
}

// passOn forwards the body as read, uncompiled, for reason.
func (g *Gateway) passOn(r *http.Request, ex *exchange, c *candidate, reason compiler.Reason, detail string) func() {
	c.reserved.endWork()
	ex.out.passthrough(reason)
	ex.out.detail = detail
	ex.out.rawBytes, ex.out.sentBytes = int64(len(c.wire)), int64(len(c.wire))
	setBody(r, ex.body, c.wire)
	return c.release
}

// compileCandidate waits for a compile slot, compiles the body and sets
// what goes upstream. compile_timeout bounds the wait for a slot and the
// compile together. A waiting request holds its body and the reservation
// of its compile's working memory (admission.go), so the slot, when it
// comes, is used.
func (g *Gateway) compileCandidate(r *http.Request, ex *exchange, c *candidate) func() {
	c.mode = g.labelMode(c.tenant) // holdout.go: the tenant's label may set it
	if c.mode == compiler.ModeOff {
		return g.passOn(r, ex, c, compiler.ReasonOff, "")
	}
	req := compiler.Request{
		Path:        r.URL.Path,
		Body:        c.buf,
		Scope:       artifact.Scope{Tenant: c.tenant, Session: g.session(r)},
		Mode:        c.mode,
		DeferCommit: true,
		Scratch:     ex.body.scratch(),
		KeyID:       keyID(seal.FromContext(r.Context())),
		// holdout.go
		MinArtifactChars: g.labelMinArtifactChars(c.tenant),
		Holdout:          g.holdoutHook(ex, c.tenant, c.mode, g.Slots.full()),
	}
	g.yieldWarmUp(len(c.buf)) // warmup.go
	ctx, cancel := context.WithTimeout(r.Context(), g.CompileTimeout)
	defer cancel()
	queued := time.Now()
	// The lineage of this tenant's answers already sent (pending.go); a
	// wait cut short by the timeout leaves the acquire to fail as well.
	g.promises().wait(ctx, c.tenant)
	slot, ok := g.Slots.acquire(ctx)
	ex.out.queue = time.Since(queued)
	if !ok {
		if r.Context().Err() != nil {
			return g.passOn(r, ex, c, ReasonClientAbort, "")
		}
		return g.passOn(r, ex, c, ReasonBusy, "no compile slot within compile_timeout")
	}
	// The slot, the working memory's reservation and the compile's hold on
	// the body are returned when the compile stops, not when it returns:
	// one abandoned at compile_timeout keeps working (reading the body,
	// holding its memory) in the background until it finishes.
	compiling, _ := ex.body.tryHold() // the gateway holds it: always ok
	stopped := sync.OnceFunc(func() { ex.body.holdScratch(g.Buffered); c.reserved.endWork(); compiling(); slot() })
	req.Done = stopped
	req.Hold = ex.body.tryHold // the token counter's work past its budget reads the body under it
	res := g.compile(ctx, req)
	if res.Reason != compiler.ReasonTimeout {
		stopped() // stopped (a compile that panicked may not have said so)
	}
	if res.Reason == compiler.ReasonTimeout && r.Context().Err() != nil {
		res.Reason = ReasonClientAbort // the client left; the compile was not slow
	}
	return g.applyResult(r, ex, c, res)
}

// applyResult sets the compile's body (the rewrite in enforce mode when
// the gate accepted it, else the original) as what goes upstream and
// notes the result in the outcome.
func (g *Gateway) applyResult(r *http.Request, ex *exchange, c *candidate, res compiler.Result) (release func()) {
	out, release := c.buf, c.release
	if c.mode == compiler.ModeEnforce && res.Decision == compiler.Accepted && res.Body != nil && !ex.out.hold.control() {
		out = res.Body
		rewrite := g.holdRewrite(len(out))
		release = func() { rewrite(); c.release() }
	}
	sent := out
	if c.coding != "" {
		sent, out, res = encodeRewrite(c.coding, c.wire, c.buf, out, res, c.mode)
	}
	setBody(r, ex.body, sent)
	ex.commit = res.Commit
	g.noteRecovery(r, ex, res, c.buf, out, c.tenant)
	if g.Observe != nil {
		ex.observe = func(u provider.Usage) { g.Observe(res, u) }
	}
	ex.out.fromResult(res, int64(len(c.wire)), int64(len(sent)), c.mode)
	ex.out.conversation = g.conversationID(c.tenant, res.Conversation)
	ex.out.tenant = c.tenant
	g.settleHoldout(ex, res, c.buf) // holdout.go: a control request's outcome
	return release
}

// compile runs the compiler under the compile timeout and turns a panic into
// a pass-through of the original body.
func (g *Gateway) compile(parent context.Context, req compiler.Request) (res compiler.Result) {
	ctx, cancel := context.WithTimeout(parent, g.CompileTimeout)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			// Never log the panic value itself: it could quote content.
			fields := []zap.Field{zap.String("panic_type", fmt.Sprintf("%T", v)), zap.Stack("stack")}
			if re, ok := v.(runtime.Error); ok {
				fields = append(fields, zap.String("runtime_error", re.Error()))
			}
			g.Logger.Error("compiler panic; forwarding the original request", fields...)
			res = compiler.Result{
				Body:      req.Body,
				Decision:  compiler.Passthrough,
				Reason:    compiler.ReasonPanic,
				RawBytes:  len(req.Body),
				SentBytes: len(req.Body),
			}
		}
	}()
	return g.Compile(ctx, req)
}
