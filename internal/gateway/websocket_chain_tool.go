package gateway

import (
	"bytes"
	"slices"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
	"github.com/tokenterminator/caddy-token-terminator/internal/splice"
)

// The recovery tool along a socket chain. The provider bills a
// continuation (previous_response_id plus only the new items) as the
// chain's whole history, rendered tools first, against the prompt cache
// the chain's previous message left. The compiler sees only the
// continuation's own items, which seldom hold anything to replace, so on
// its own it sends a continuation as it came: without the tool its chain's
// opening carried. Each such toggle of the tools array makes the provider
// read the whole held history again uncached. So a continuation follows
// its chain: one whose chain carried the tool carries it too (the same
// definition, appended after the client's tools, as the compiler appends
// it), and one whose chain did not carries none (a rewrite that would add
// it is declined).
//
// The unit priced is the chain's history, since that is what the
// provider bills. Adding the tool's T bytes to a continuation whose chain
// holds at least H bytes after the tools, sent within the cache's TTL,
// bills T+H at the cache-read rate r where without it H is billed again
// at the write rate w (1 at OpenAI): the tool is added only when
// H·(w−r) ≥ T·r, with H counted as the bytes of the chain's messages
// (a lower bound: the responses' output is held too), so the message
// with the tool is never expected to cost more than the one without
// (invariant 8). Bytes grow by T; cost is the rule that decides.

// wsChainTool is what a message's chain says about the tool.
type wsChainTool struct {
	inherited bool              // the message continues a response of this socket (not a warm-up's)
	tool      bool              // that chain's messages carried the tool
	held      int               // bytes of the chain's messages so far
	n         int               // the chain's messages so far
	last      time.Time         // when the chain's last message went out
	reach     []artifact.Digest // what the chain's rewrites reached (the tool serves these)
}

// chainTool makes a continuation's tools follow its chain (see above):
// out and res as compileMessage returned them (out nil: the message goes
// as it came), model the message's model.
func (s *wsSession) chainTool(m *wsMessage, msg, out []byte, res compiler.Result, model string) ([]byte, compiler.Result) {
	c := m.chainTool
	if !c.inherited || !m.enforced {
		return out, res
	}
	if !c.tool {
		if out != nil && res.RecoveryTool {
			s.declineMessage(m, ReasonChainTool)
			res.RecoveryTool = false
			return nil, res
		}
		return out, res
	}
	if out != nil && res.RecoveryTool {
		res.Reachable = unionDigests(c.reach, res.Reachable)
		return out, res
	}
	def := recovery.Definition(provider.Responses)
	base := msg
	if out != nil {
		base = out
	}
	with, tools, ok := withChainTool(base, def)
	if !ok || !s.toolPays(c, len(def), tools, model) {
		return out, res
	}
	res.RecoveryTool, res.Body = true, with
	res.Reachable = unionDigests(c.reach, res.Reachable)
	// The message now differs from what came, only by the insertion: it
	// is a rewrite, recorded with its bytes (larger by the tool's).
	o := &m.ex.out
	o.decision, o.reason, o.sentBytes, o.chainTool = compiler.Accepted, "", int64(len(with)), true
	return with, res
}

// toolPays reports whether carrying the tool's n bytes keeps the
// continuation's expected bill at most what it is without them; tools is
// the client's tools array's length, taken off each of the chain's
// messages (with the tool), so that H counts what follows the tools.
func (s *wsSession) toolPays(c wsChainTool, n, tools int, model string) bool {
	cm := s.h.costModel(wsCompiledFormat, model)
	if cm.TTL > 0 && time.Since(c.last) >= cm.TTL {
		return false // the cache is gone either way: the tool would only add
	}
	w := cm.CacheWrite
	if w < 1 {
		w = 1
	}
	h := c.held - c.n*(tools+n)
	return h > 0 && float64(h)*(w-cm.CacheRead) >= float64(n)*cm.CacheRead
}

// withChainTool appends def to body's tools array, or adds a tools
// member holding only def when it has none, and returns the length of
// the client's tools array; false when the body is not an object, its
// tools are not an array, or they already name the tool.
func withChainTool(body, def []byte) ([]byte, int, bool) {
	root, err := jsonv.Parse(body, jsonv.MaxDepth)
	if err != nil || !root.Is(jsonv.Object) {
		return nil, 0, false
	}
	t := root.Get("tools")
	tools := 0
	var at int
	var ins []byte
	switch {
	case t == nil:
		at, ins = root.End-1, []byte(`"tools":[`)
		if len(root.Members) > 0 {
			ins = []byte(`,"tools":[`)
		}
		ins = append(append(ins, def...), ']')
	case !t.Is(jsonv.Array):
		return nil, 0, false
	default:
		for _, e := range t.Elems {
			if e.Get("name").StringIs(body, recovery.ToolName) {
				return nil, 0, false
			}
		}
		tools = t.End - t.Start
		at, ins = t.End-1, def
		if len(t.Elems) > 0 {
			ins = append([]byte{','}, def...)
		}
	}
	out, err := splice.Insert(bytes.Clone(body), at, ins)
	if err != nil {
		return nil, 0, false
	}
	return out, tools, true
}

// wsReachMax bounds the digests a socket chain remembers as reached
// (wsChain.reach): every continuation given the tool adds what its own
// compile reached, so a long chain would otherwise grow without end, once
// per remembered response (wsChainsMax). The newest are kept: the
// continuation's own first, then the chain's (unionDigests), cut at the
// end, so what falls off is what the chain's earliest messages reached and
// the model last saw longest ago. Such an artifact answers as unknown to
// the tool, as one of another conversation would; the recovery API still
// serves it. 1024 digests are 32 KiB per remembered response, 8 MiB per
// socket if each of its wsChainsMax responses held a full list of its
// own; a continuation that reaches nothing new shares its chain's list.
const wsReachMax = 1024

// unionDigests is b and a without repeats, b's first (b is the newer:
// the current message's), at most wsReachMax of them. When b adds nothing
// to a, a itself is returned: the lists are never written after they
// are made, so chains share one.
func unionDigests(a, b []artifact.Digest) []artifact.Digest {
	if len(a) == 0 {
		return capDigests(b)
	}
	if !addsTo(a, b) {
		return capDigests(a)
	}
	seen := make(map[artifact.Digest]bool, len(a)+len(b))
	out := make([]artifact.Digest, 0, min(len(a)+len(b), wsReachMax))
	for _, list := range [2][]artifact.Digest{b, a} {
		for _, d := range list {
			if len(out) == wsReachMax {
				return out
			}
			if !seen[d] {
				seen[d] = true
				out = append(out, d)
			}
		}
	}
	return out
}

// addsTo reports whether b holds a digest a does not. A continuation
// reaches few: for those a scan of a costs less than a set of it.
func addsTo(a, b []artifact.Digest) bool {
	if len(b) > 16 {
		in := make(map[artifact.Digest]bool, len(a))
		for _, d := range a {
			in[d] = true
		}
		for _, d := range b {
			if !in[d] {
				return true
			}
		}
		return false
	}
	for _, d := range b {
		if !slices.Contains(a, d) {
			return true
		}
	}
	return false
}

// capDigests is the first wsReachMax of ds (the newest), sharing ds.
func capDigests(ds []artifact.Digest) []artifact.Digest {
	if len(ds) > wsReachMax {
		return ds[:wsReachMax:wsReachMax]
	}
	return ds
}

// chainSent records what m's continuations inherit once it went out as
// sent (nil: as it came, n bytes): whether it carried the tool, and the
// chain's bytes and reach so far.
func (s *wsSession) chainSent(m *wsMessage, n int, sent []byte, res compiler.Result) {
	c := m.chainTool
	tool := sent != nil && res.RecoveryTool
	if sent != nil {
		n = len(sent)
	}
	if !c.inherited {
		c = wsChainTool{}
	}
	m.chained = wsChain{tool: tool, held: c.held + n, n: c.n + 1, last: time.Now(), reach: c.reach, warmUp: m.warmUp && !tool,
		inline: chainInline(m, res)} // websocket_lease.go
	if tool {
		m.chained.reach = capDigests(res.Reachable)
	}
}
