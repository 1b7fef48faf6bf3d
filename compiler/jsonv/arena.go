package jsonv

import "unsafe"

// Arena is memory for the trees of parses that live and die together (one
// request's), kept for the parses after them. A tree is thousands of small
// nodes, members and element lists: a parse into a fresh heap allocates
// them in chunks, and the collector then marks and frees them on every
// request. Parsed into an arena, the chunks are allocated once and handed
// out again after Reset.
//
// The zero value is ready. An arena serves one goroutine at a time, and
// whoever owns it calls Reset only once no tree parsed into it is used any
// more: Reset overwrites the nodes.
type Arena struct {
	nodes   chunks[Node]
	members chunks[Member]
	elems   chunks[*Node]
	// What the last parse left: the rest of its chunks, its work stacks
	// and key spellings, for the next.
	slab        []Node
	mslab       []Member
	eslab       []*Node
	memberStack []Member
	elemStack   []*Node
	keys        map[string]string
}

// maxArenaBytes bounds what Reset keeps: a request's trees take ~200 KB
// per megabyte of typical body, and an odd request of many tiny values
// (up to MaxNodes) should not stay in memory after it.
const maxArenaBytes = 1 << 20

// chunks is an arena's memory of one type: the chunks handed out since
// the last Reset (used[:next]) and those free after them.
type chunks[T any] struct {
	all  [][]T
	next int
}

// take returns a chunk of at least n elements: a free one large enough
// (the first, moved up to be handed out), else a new one.
func (c *chunks[T]) take(n int) []T {
	for i := c.next; i < len(c.all); i++ {
		if s := c.all[i]; len(s) >= n {
			c.all[i], c.all[c.next] = c.all[c.next], s
			c.next++
			return s
		}
	}
	s := make([]T, n)
	c.all = append(c.all, nil)
	copy(c.all[c.next+1:], c.all[c.next:])
	c.all[c.next] = s
	c.next++
	return s
}

// reset overwrites every chunk handed out with fill and keeps the chunks
// within limit bytes (size bytes per element) for the next parses.
func (c *chunks[T]) reset(fill T, size, limit int) {
	kept := 0
	for i, s := range c.all {
		if i < c.next {
			for j := range s {
				s[j] = fill
			}
		}
		if kept+len(s)*size > limit {
			clear(c.all[i:]) // the collector takes the rest
			c.all = c.all[:i]
			break
		}
		kept += len(s) * size
	}
	c.next = 0
}

// Reset makes the arena's memory available to the next parse: every tree
// parsed into it must be unreachable by then.
func (a *Arena) Reset() { a.reset(Node{}) }

// ResetPoisoned is Reset for tests: the nodes it frees hold a kind and
// offsets no parse makes, so a tree used after its arena was reset fails
// loudly instead of reading the next request's values.
func (a *Arena) ResetPoisoned() { a.reset(Node{Kind: poisonKind, Start: -1, End: -1}) }

// poisonKind is no Kind a parse makes (Kind.String panics on it).
const poisonKind Kind = 0xFF

func (a *Arena) reset(fill Node) {
	a.nodes.reset(fill, int(unsafe.Sizeof(Node{})), maxArenaBytes/2)
	a.members.reset(Member{}, int(unsafe.Sizeof(Member{})), maxArenaBytes/4)
	a.elems.reset(nil, int(unsafe.Sizeof((*Node)(nil))), maxArenaBytes/4)
	a.slab, a.mslab, a.eslab = nil, nil, nil
	if cap(a.memberStack) > maxArenaStack || cap(a.elemStack) > maxArenaStack {
		a.memberStack, a.elemStack = nil, nil
	}
	if len(a.keys) > maxArenaKeys {
		a.keys = nil
	} else {
		clear(a.keys) // no request's spellings outlive it
	}
}

// maxArenaStack bounds the work stacks Reset keeps: the members (or
// elements) of the containers open at once, such as a history's messages.
const maxArenaStack = 4096

// maxArenaKeys bounds the key spellings an arena keeps room for.
const maxArenaKeys = 256

// begin lends the arena's memory to p for one parse.
func (a *Arena) begin(p *parser) {
	p.arena = a
	p.slab, p.mslab, p.eslab = a.slab, a.mslab, a.eslab
	p.members, p.elems, p.keys = a.memberStack[:0], a.elemStack[:0], a.keys
}

// end takes back what p did not use. A parse that failed may leave
// entries on its stacks: they are cleared, as the parse's own pops do.
func (a *Arena) end(p *parser) {
	a.slab, a.mslab, a.eslab = p.slab, p.mslab, p.eslab
	clear(p.members)
	clear(p.elems)
	a.memberStack, a.elemStack, a.keys = p.members[:0], p.elems[:0], p.keys
}
