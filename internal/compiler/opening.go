package compiler

import (
	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// conversationKey is the chain hash of a request's opening: its units up to
// and including the first history element that carries the person's own
// input (msgInfo.turnStart), so a system prompt, developer messages and the
// client's session context are part of it, and so is the first thing the
// person asked.
//
// It is the same on every request of a conversation from the first one
// on: the opening is a prefix every later request resends. (A fixed unit
// index is not: with no system prompt, a first request [user] and its
// successor [user, assistant, user] would pick different units; and two
// developer messages alone would make every conversation of a client that
// opens with them one conversation.) A request with no such element is
// keyed by all its units.
func conversationKey(format provider.Format, d *doc, h *hasher) artifact.Digest {
	n := len(d.units)
	for i := range d.infos {
		if d.infos[i].turnStart {
			n = d.offset + i + 1
			break
		}
	}
	chain := h.chain(format, d.units[:n])
	return chain[n-1]
}
