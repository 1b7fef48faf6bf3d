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

// chunks is an arena's memory of one type: the chunks handed out since
// the last Reset (all[:next]) and those free after them.
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

// reset keeps the chunks that fit within limit bytes (size bytes per
// element) and lets the collector take the others. Every chunk handed out
// and kept is overwritten with fill, so it holds nothing of the trees it
// served; with poison, those let go are overwritten too, so that a tree
// read after the reset fails wherever its nodes were.
func (c *chunks[T]) reset(fill T, size, limit int, poison bool) {
	kept := c.all[:0]
	bytes := 0
	for i, s := range c.all {
		fits := bytes+len(s)*size <= limit
		if i < c.next && (fits || poison) {
			for j := range s {
				s[j] = fill
			}
		}
		if fits {
			kept = append(kept, s)
			bytes += len(s) * size
		}
	}
	clear(c.all[len(kept):])
	c.all = kept
	c.next = 0
}

func (c *chunks[T]) bytes(size int) int {
	n := 0
	for _, s := range c.all {
		n += len(s) * size
	}
	return n
}

var (
	nodeSize   = int(unsafe.Sizeof(Node{}))
	memberSize = int(unsafe.Sizeof(Member{}))
	elemSize   = int(unsafe.Sizeof((*Node)(nil)))
)

// Reset makes the arena's memory available to the next parse: every tree
// parsed into it must be unreachable by then. It keeps at most keep bytes
// in all, chunks and work stacks (a pooled body's share: an odd request of
// many tiny values, up to MaxNodes, should not stay in memory after it).
func (a *Arena) Reset(keep int) { a.reset(keep, Node{}, Member{}, nil, false) }

// ResetPoisoned is Reset for tests: the nodes, members and elements it
// frees hold a kind and offsets no parse makes, so a tree used after its
// arena was reset fails loudly instead of reading the next request's
// values.
func (a *Arena) ResetPoisoned(keep int) {
	a.reset(keep, poisonNode, Member{Key: "\xff", Value: &poisonNode}, &poisonNode, true)
}

// poisonKind is no Kind a parse makes (Kind.String panics on it).
const poisonKind Kind = 0xFF

var poisonNode = Node{Kind: poisonKind, Start: -1, End: -1}

func (a *Arena) reset(keep int, node Node, member Member, elem *Node, poison bool) {
	a.nodes.reset(node, nodeSize, keep/2, poison)
	a.members.reset(member, memberSize, keep/8, poison)
	a.elems.reset(elem, elemSize, keep/8, poison)
	a.slab, a.mslab, a.eslab = nil, nil, nil
	if cap(a.memberStack)*memberSize+cap(a.elemStack)*elemSize > keep/4 {
		a.memberStack, a.elemStack = nil, nil
	}
	if len(a.keys) > maxArenaKeys {
		a.keys = nil
	} else {
		clear(a.keys) // no request's spellings outlive it
	}
}

// Bytes is the memory the arena holds: its chunks, free or handed out, and
// its work stacks.
func (a *Arena) Bytes() int {
	return a.nodes.bytes(nodeSize) + a.members.bytes(memberSize) + a.elems.bytes(elemSize) +
		cap(a.memberStack)*memberSize + cap(a.elemStack)*elemSize
}

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
