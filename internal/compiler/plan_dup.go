package compiler

import (
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
)

// Duplicates keep the cached copy. When a result's earlier copy went out
// inline in the previous forwarded request, it lies in the provider's
// cached prefix: receipting it would rewrite that prefix. Instead the
// earlier copy stays and the later copy, once the model has answered it,
// becomes a receipt that names the earlier copy's call (same_as=...). An
// unanswered copy always goes inline.

// keepsCached reports whether slot i is a copy the previous forwarded
// request carried inline in the prefix this request repeats.
func (p *plan) keepsCached(i int) bool {
	if p.prev == nil {
		return false
	}
	s := p.d.slots[i]
	return s.unit < p.lineage.Length && !p.prev.wasReceipted(s.text.digest)
}

// old reports whether slot i lies in the part of the request its recorded
// ancestor already carried.
func (p *plan) old(i int) bool { return p.prev != nil && p.d.slots[i].unit < p.lineage.Length }

// callID is the id of the tool call a slot answers: Chat tool_call_id,
// Responses call_id, Anthropic tool_use_id of the block holding it.
func (d *doc) callID(s slot) string {
	u := d.units[s.unit]
	for _, k := range []string{"tool_call_id", "call_id"} {
		if id, ok := u.Get(k).Text(d.src); ok {
			return id
		}
	}
	if content := u.Get("content"); content.Is(jsonv.Array) {
		for _, b := range content.Elems {
			if b.Get("content") == s.value {
				id, _ := b.Get("tool_use_id").Text(d.src)
				return id
			}
		}
	}
	return ""
}

// receiptSameAs is the receipt of a later copy: the artifact's receipt
// naming the call whose result, still in the prompt, holds the same text.
// The call id is sanitized like a tool name (ids carry no content).
func receiptSameAs(receipt, call string) string {
	if call == "" {
		return receipt
	}
	return strings.TrimSuffix(receipt, "]") + " | same_as=" + artifact.SanitizeTool(call) + "]"
}
