package compiler

import (
	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// Leases in continuations. A continuation's items follow the response it
// names, so every tool result in it is unanswered: the model has not seen
// it yet, and a receipt in its place could leave the model with no copy.
// That holds unless the content is already in what the provider keeps for
// this chain, inline: then the model reads the earlier copy there, and
// the new one is a repeat like any leased result (a file read again, a
// test run again with the same output). Lineage exposures cannot say
// that: they count deliveries anywhere in the conversation's history,
// and a later whole body may have receipted the copy since. So the
// caller names the set (Request.HeldInline): the keyed digests sent
// inline by the chain's last whole body and by each continuation after
// it, which the provider holds in the chain's context; each compile
// reports what it sent inline (Result.Inline) for the next one to add.
// A digest in that set lifts only the unanswered rule: the lease still
// needs InlineLeases exposures, and the receipt still goes out only once
// its content is durable and verified, as every receipt.

// heldInline is the set of Request.HeldInline when the body continues a
// response the provider holds (a Responses body naming
// previous_response_id); nil otherwise, so a whole body never leases an
// unanswered result on a caller's word.
func heldInline(f format, d *doc, req Request) map[artifact.Digest]bool {
	if len(req.HeldInline) == 0 || f.name() != provider.Responses || !d.root.Get("previous_response_id").Is(jsonv.String) {
		return nil
	}
	set := make(map[artifact.Digest]bool, len(req.HeldInline))
	for _, dg := range req.HeldInline {
		set[dg] = true
	}
	return set
}

// mayLease reports whether slot i may be leased as far as the model's
// copy goes: answered, or held inline in the chain's context.
func (p *plan) mayLease(i int) bool {
	s := p.d.slots[i]
	return !p.hist.unanswered(s) || p.held[s.text.digest]
}

// inlineDigests is what the forwarded body carries inline of the
// eligible slots, each digest once in slot order: all of them when the
// body goes as it came (forwarded false), else those neither receipted
// nor folded away.
func inlineDigests(p *plan, forwarded bool) []artifact.Digest {
	var out []artifact.Digest
	seen := map[artifact.Digest]bool{}
	for i, s := range p.d.slots {
		if i >= len(p.eligible) || !p.eligible[i] || seen[s.text.digest] {
			continue
		}
		if forwarded && (p.receipt[i] || p.gone[i]) {
			continue
		}
		seen[s.text.digest] = true
		out = append(out, s.text.digest)
	}
	return out
}
