package gateway

import (
	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
)

// Leases along a socket chain. The provider keeps a chain's context: the
// body that opened it (a message naming no previous_response_id) and each
// message continuing it, as they were sent. A chain remembers the keyed
// artifacts those messages carried inline (wsChain.inline, the compiles'
// Result.Inline), and a continuation is compiled with its chain's set
// (compiler.Request.HeldInline), so a new result repeating one of them
// may be leased: the model still reads the earlier copy in the chain's
// context (the compiler's continuation_lease.go). A message that opens a
// chain starts a new set. What went out as it came without a plan (a
// pass-through before the compile planned, a holdout control) adds
// nothing, nor does a rewrite declined after the compile: the set may
// miss what the provider holds, never name what it does not. Bounded as
// the chain's reach is (wsReachMax, newest kept).

// heldInline is what a message continuing chain may name as held inline:
// nil for a message that opens a chain, or continues one this socket does
// not remember.
func heldInline(chain wsChain, inherited bool) []artifact.Digest {
	if !inherited {
		return nil
	}
	return chain.inline
}

// chainInline is the set m's continuations inherit: what m's chain held
// inline and what m itself carried inline (res.Inline, which describes
// the rewrite even when it was declined and the message went as it came,
// holding more inline), m's own first.
func chainInline(m *wsMessage, res compiler.Result) []artifact.Digest {
	return unionDigests(m.heldInline, res.Inline)
}
