package compiler

import (
	"context"
	"crypto/sha256"
	"slices"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// Lineage along previous_response_id chains (Responses over a socket).
//
// A continuation (previous_response_id plus only the items after the
// response it names) holds no opening, so its own chain hash is an
// unrelated node, and what it delivered inline was unknown to the next
// turn's opening (the whole history again): those results counted as
// first exposures once more. Two designs were weighed:
//
//   - a Request input naming the node a continuation continues, and a
//     gateway-held per-socket node for the next opening to seed its
//     exposures from. Codex opens one socket per turn, so the next opening
//     arrives on a socket that knows nothing; the state would have to live
//     in the gateway across sockets, a second owner of lineage state.
//   - the continuation's record extends its chain's lineage node with the
//     hashes of the items the client will re-send: the previous
//     response's output items (as the provider's response.completed
//     lists them, hashed as the client re-sends them: outputProjection)
//     and then the continuation's own input items. The record lands in
//     the Store at the chain hash the next opening computes for that
//     prefix of its history, so the opening's ordinary Ancestor look-up
//     finds it.
//
// The second is built: the Store stays the one owner of lineage, the
// look-up crosses sockets and gateway instances, isolation is the Store's
// (tenant and session scope; a node is reached only through a chain hash
// of this conversation's own history), and a mismatch (a client that
// re-sends its items in another spelling) finds only the older ancestor,
// as without it. It also frees a turn's opening from the response id it
// continues: Codex's opening continues the turn's warm-up, and as a body
// of its own its chain starts with that id, unique per response at the
// provider, so no later turn would share its prefix. The gateway carries
// one Chain per response it remembers (two digests and two lengths),
// bounded with the socket's chains.

// Chain names a request's lineage node, for a continuation of its
// response to extend. The zero value names nothing.
type Chain struct {
	// End is the chain hash through the request's units (what its
	// record is stored under) and Length their number, counted from the
	// opening of the history the provider holds.
	End    artifact.Digest
	Length int
	// Next is End continued through the response's output items
	// (Continue), NextLength their number; zero until then.
	Next       artifact.Digest
	NextLength int
}

// Continued reports whether c names a node continued through its
// response's output, so a continuation may extend it.
func (c Chain) Continued() bool { return c.Length > 0 && c.NextLength >= c.Length }

// chainSeed is the first link of every chain of format.
func chainSeed(format provider.Format) artifact.Digest {
	return sha256.Sum256([]byte("token-terminator/chain/v1/" + format))
}

// link is one step of a chain: H(prev, message).
func link(prev, m artifact.Digest) artifact.Digest {
	var buf [64]byte
	copy(buf[:32], prev[:])
	copy(buf[32:], m[:])
	return sha256.Sum256(buf[:])
}

// maxOutputItems bounds the output items Continue hashes; a response with
// more is not continued (its continuation finds no node: today's
// behaviour).
const maxOutputItems = 4096

// Continue returns c continued through the output items of a Responses
// response.completed event (the whole event message), for a continuation
// of that response to extend. false (c unchanged) when c names no node
// or the event does not parse as a completed response with an output
// array. It reads only hashes: nothing of the content is kept.
func Continue(c Chain, event []byte) (Chain, bool) {
	if c.Length <= 0 || len(event) == 0 {
		return c, false
	}
	root, err := jsonv.Parse(event, maxDepthForRequests)
	if err != nil {
		return c, false
	}
	out := root.Get("response").Get("output")
	if !out.Is(jsonv.Array) || len(out.Elems) > maxOutputItems {
		return c, false
	}
	h := newHasher(event, nil)
	next := c.End
	for _, it := range out.Elems {
		if !it.Is(jsonv.Object) {
			return c, false
		}
		next = link(next, h.message(outputProjection(it, event)))
	}
	c.Next, c.NextLength = next, c.Length+len(out.Elems)
	return c, true
}

// outputProjection is an output item as a client re-sends it in its next
// request's input: Codex keeps the provider's spelling (ids, status,
// annotations), adds its own metadata (which the canonical form leaves
// out: canonIgnored) and writes a reasoning item's absent content as
// null. The node shares the event's source.
func outputProjection(it *jsonv.Node, src []byte) *jsonv.Node {
	if !it.Get("type").StringIs(src, respReasoning) || it.Get("content") != nil {
		return it
	}
	p := *it
	p.Members = append(slices.Clip(it.Members), jsonv.Member{Key: "content", Value: &jsonv.Node{Kind: jsonv.Null}})
	return &p
}

// continuation reports whether the request is a continuation the plan
// extends req.Continues for: a Responses body naming previous_response_id
// with at least one input item, and a chain continued through its
// response. Anything else is compiled as a body of its own.
func continuation(f format, d *doc, req Request) bool {
	if req.Continues == nil || !req.Continues.Continued() || f.name() != provider.Responses {
		return false
	}
	prev := d.root.Get("previous_response_id")
	return prev.Is(jsonv.String) && d.list != nil && len(d.list.Elems) > 0 && d.offset < len(d.units)
}

// continuedLineage is lineage for a continuation: the chain is the
// continued node's extended by the input items (the units after
// previous_response_id and instructions, which the next whole history
// does not repeat at that place), and the lineage is the longest recorded
// proper prefix of the continued node followed by that chain. A node past
// the continued one (a turn's opening that continues a warm-up and
// re-sends the history an earlier turn's chain recorded) is an ancestor
// as in a whole body: Length counts the body's units it covers, its cache
// state is read. The continued node itself covers none of the body's
// units (Length 0) and its cache state, which describes the last whole
// body, is not this fragment's: it is not read (as before, no cache state
// is known for a continuation) but kept for the record (contCache), so an
// opening that finds this record sees the cache state of the last whole
// body. false: no node was found (the continued one was never committed,
// or expired), and the body is compiled as one of its own, as before;
// recording it under the extended chain would hide the older ancestor's
// exposures from the next opening.
func (c *Compiler) continuedLineage(ctx context.Context, h *hasher, p *plan, req Request) (bool, error) {
	cont := *req.Continues
	items := p.d.units[p.d.offset:]
	look := make([]artifact.Digest, 1, len(items)+1)
	look[0] = cont.End
	prev := cont.Next
	for _, u := range items {
		prev = link(prev, h.messageOf(u))
		look = append(look, prev)
	}
	lin, err := c.store.Ancestor(ctx, req.Scope, look)
	if err != nil || !lin.Found {
		return false, err
	}
	p.chain, p.chainBase = look[1:], cont.NextLength
	if at := lin.Length - 1; at > 0 {
		lin.Length = p.d.offset + at
		p.lineage = lin
		return true, nil
	}
	p.lineage = artifact.Lineage{Found: true, Ancestor: lin.Ancestor, Exposures: lin.Exposures}
	p.contCache, p.continued = lin.Cache, true
	return true, nil
}

// unitIDs is the identity of each unit of the body for the rendering the
// cost model prices: p.chain, except for a continuation, whose p.chain
// starts at its first item (the lineage's coordinates) while the rendering
// covers the whole body.
func (p *plan) unitIDs() []artifact.Digest {
	if p.unitChain != nil {
		return p.unitChain
	}
	return p.chain
}
