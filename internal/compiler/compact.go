package compiler

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
)

// compactBlock is how many turns move into the compacted prefix at once.
// Compaction changes the bytes of a request where the compacted prefix ends,
// which busts the provider's prompt cache from that point on. The vault and
// fold boundaries are computed from the turn count rounded down to a
// multiple of compactBlock, so both move together once every compactBlock
// turns; in between, every request carries the same compacted prefix.
const compactBlock = 4

// Summary bounds, in characters.
const (
	summaryUserChars      = 100
	summaryAssistantChars = 160
	summaryMaxTools       = 8
)

// history returns the list that holds the conversation (messages or input
// items) and the index of its first element in doc.units.
func (d *doc) history() (list *jsonv.Node, offset int) { return d.list, d.offset }

// msgInfo is what compaction needs to know of one history element, as the
// format's extractor (parse) read it.
type msgInfo struct {
	turnStart  bool     // carries the person's own input
	pinned     bool     // system/developer or client session context only: stays where it is
	assistant  bool     // produced by the model
	userText   textRef  // the person's text, if turnStart (session context parts skipped)
	assistText textRef  // the assistant's text, if assistant
	tools      []string // names of tools called
	calls      []string // tool call ids opened
	results    []string // tool call ids answered
	// preamble holds the client session-context parts of a message that
	// also holds other content, in content (its list of parts): when the
	// message folds, these parts stay, as a message of their own.
	content  *jsonv.Node
	preamble []*jsonv.Node
	// first backs the first tool, call id and result id: most elements
	// open or answer one call, so describing them allocates nothing more.
	first [3]string
}

// call records a tool call the element opens.
func (in *msgInfo) call(tool, id string) {
	if in.tools == nil {
		in.tools = in.first[0:0:1]
	}
	if in.calls == nil {
		in.calls = in.first[1:1:2]
	}
	in.tools = append(in.tools, tool)
	in.calls = append(in.calls, id)
}

// answer records a tool call id the element answers.
func (in *msgInfo) answer(id string) {
	if in.results == nil {
		in.results = in.first[2:2:3]
	}
	in.results = append(in.results, id)
}

// turn is a run of history elements from one turn start to the next.
type turn struct {
	first, last int // indexes into the history list, inclusive
}

// fold is one old turn replaced by a summary message.
type fold struct {
	turn    turn
	summary []byte // the summary message, JSON
	art     artifact.Artifact
	edits   []edit
	size    int   // bytes of what replaces the turn's folded runs (summary, kept preamble parts)
	keep    []int // the turn's output elements, as in compaction.keep
}

// compaction is the compaction plan of one request.
type compaction struct {
	list     *jsonv.Node
	offset   int
	vaulted  []bool // per slot: receipted by compaction
	inFolded []bool // per slot: inside a folded turn
	folds    []fold
	keep     []int // for each output history element: original index, -1 for a summary, or preambleOf(i)
}

// preambleOf is the keep entry of the message made of element i's session
// context parts, kept when the rest of element i folded.
func preambleOf(i int) int { return -2 - i }

// preambleIndex inverts preambleOf: the element a keep entry k < -1 came from.
func preambleIndex(k int) int { return -2 - k }

// history is the described conversation list of a request.
type history struct {
	list          *jsonv.Node
	offset        int // index of list.Elems[0] in doc.units
	infos         []msgInfo
	turns         []turn
	lastAssistant int    // index of the last element produced by the model, -1 if none
	clean         []bool // clean[p]: no tool call opened before element p is answered at or after it
}

// describeHistory gathers the turns of the history the format's extractor
// described (doc.infos); leases and compaction both use it. It returns nil
// when the request has none.
func describeHistory(d *doc) *history {
	list, offset := d.history()
	if list == nil || len(list.Elems) == 0 {
		return nil
	}
	h := &history{list: list, offset: offset, infos: d.infos, lastAssistant: -1}
	for i := range list.Elems {
		in := &d.infos[i]
		if in.turnStart {
			h.turns = append(h.turns, turn{first: i, last: i})
		} else if len(h.turns) > 0 {
			h.turns[len(h.turns)-1].last = i
		}
		if in.assistant {
			h.lastAssistant = i
		}
	}
	h.clean = cleanBoundaries(h.infos)
	return h
}

// unanswered reports whether a slot is a tool result the model has not
// responded to yet (after the last assistant message): such a result is
// always sent inline, whatever leases and compaction would say.
func (h *history) unanswered(s slot) bool {
	return h != nil && s.unit-h.offset > h.lastAssistant
}

// cleanBoundaries marks, for every position p in [0, n], whether no tool call
// opened before element p is answered at or after it: the places where a
// run of folded elements may start or end. One pass: each answer dirties
// the positions after its call (the latest of its id) up to the answer.
func cleanBoundaries(infos []msgInfo) []bool {
	n := len(infos)
	diff := make([]int, n+2)
	open := map[string]int{} // call id -> element that opened it (latest)
	for i, in := range infos {
		for _, id := range in.results {
			// A call stays open after its answer: a second answer of the
			// same call (a client resending an output) must not lose it.
			if o, ok := open[id]; ok {
				diff[o+1]++
				diff[i+1]--
			}
		}
		for _, id := range in.calls {
			open[id] = i
		}
	}
	clean := make([]bool, n+1)
	depth := 0
	for p := 0; p <= n; p++ {
		depth += diff[p]
		clean[p] = depth == 0
	}
	return clean
}

// compact plans context compaction: old large tool results become receipts
// and turns older than CollapseAfterTurns become summaries. The last
// InlineRecentTurns turns, and any tool result the model has not answered
// yet, are never touched.
//
// aligned is the compaction boundary in turns (alignedTurns of the turn
// count, or an earlier boundary the cost decision keeps).
func (c *Compiler) compact(p *plan, h *history, aligned int) *compaction {
	d := p.d
	turns, list, offset := h.turns, h.list, h.offset
	if len(turns) == 0 {
		return nil
	}
	cp := &compaction{list: list, offset: offset, vaulted: make([]bool, len(d.slots)), inFolded: make([]bool, len(d.slots))}

	// Both boundaries move together, only when the turn count crosses a
	// multiple of compactBlock; they never enter the guaranteed windows.
	aligned = min(aligned, alignedTurns(len(turns)))

	excluded := c.excludedTurns(d, turns, offset, len(turns))
	c.vaultOld(p, h, cp, aligned)
	foldTurns := c.foldPrefix(h, aligned, excluded)
	// A turn shorter than its summary stays inline (that depends only on
	// the turn's own bytes, so it is as sticky as folding itself), unless a
	// tool call crosses its boundary: then it folds with its neighbour.
	folded := make([]bool, foldTurns)
	for t := 0; t < foldTurns; t++ {
		if c.tooLarge(h, t) || excluded[t] {
			continue
		}
		f, ok := p.foldMemo[turns[t].first]
		if !ok {
			f = c.foldTurn(d, list, h.infos, turns[t])
			if p.foldMemo != nil {
				p.foldMemo[turns[t].first] = f
			}
		}
		if folded[t] = f.size < turns[t].size(list) || h.crossed(t); folded[t] {
			cp.folds = append(cp.folds, f)
		}
	}
	if len(cp.folds) == 0 {
		return cp
	}
	cp.place(d, h, folded)
	return cp
}

// vaultOld marks the old tool results to vault: every slot in a turn
// before the recent window.
func (c *Compiler) vaultOld(p *plan, h *history, cp *compaction, aligned int) {
	opt := c.opts.Compaction
	vaultTurns := max(0, aligned-opt.InlineRecentTurns)
	if vaultTurns == 0 {
		return
	}
	end := h.turns[vaultTurns-1].last // last element of the vaulted turns
	for i, s := range p.d.slots {
		el := s.unit - h.offset
		if el < 0 || el > end || h.unanswered(s) || p.replace[i] || p.reinline(s.text.digest) || c.excluded(s.tool) {
			continue
		}
		if s.text.chars >= opt.MinVaultChars && s.text.chars <= c.opts.MaxArtifactChars {
			cp.vaulted[i] = true
		}
	}
}

// foldPrefix is how many old turns may fold: a prefix of turns that ends
// at a clean boundary, so a tool call never leaves without its result. A
// turn too large to vault cannot fold; if a call crosses its boundary, its
// neighbours cannot either, so the prefix ends before it.
//
// excluded marks turns holding a result of an excluded tool: like a turn
// too large to vault, such a turn never folds.
func (c *Compiler) foldPrefix(h *history, aligned int, excluded []bool) int {
	opt, turns := c.opts.Compaction, h.turns
	cut := func(n int) int {
		for n > 0 && !h.clean[turns[n-1].last+1] {
			n--
		}
		return n
	}
	foldTurns := 0
	if opt.CollapseAfterTurns > 0 && h.clean[turns[0].first] {
		foldTurns = cut(max(0, aligned-opt.CollapseAfterTurns))
	}
	for t := 0; t < foldTurns; t++ {
		if (c.tooLarge(h, t) || excluded[t]) && h.crossed(t) {
			return cut(t)
		}
	}
	return foldTurns
}

// tooLarge reports whether turn t is too large to vault.
func (c *Compiler) tooLarge(h *history, t int) bool {
	return h.turns[t].size(h.list) > c.opts.MaxArtifactChars
}

// crossed reports whether a tool call crosses a boundary of turn t.
func (h *history) crossed(t int) bool {
	return !h.clean[h.turns[t].first] || !h.clean[h.turns[t].last+1]
}

// place marks the slots of folded turns and lays out the output history:
// the preamble, then per folded turn its summary and its pinned messages,
// every other element unchanged. folded[t] says whether turn t folded.
func (cp *compaction) place(d *doc, h *history, folded []bool) {
	turns, foldTurns := h.turns, len(folded)
	for i, s := range d.slots {
		el := s.unit - h.offset
		for t := 0; t < foldTurns; t++ {
			if folded[t] && el >= turns[t].first && el <= turns[t].last {
				cp.inFolded[i] = true
				cp.vaulted[i] = false
			}
		}
	}
	cp.keep = seq(turns[0].first)
	next := 0 // index into cp.folds
	for t := 0; t < foldTurns; t++ {
		if folded[t] {
			cp.keep = append(cp.keep, cp.folds[next].keep...)
			next++
			continue
		}
		for i := turns[t].first; i <= turns[t].last; i++ {
			cp.keep = append(cp.keep, i)
		}
	}
	for i := turns[foldTurns-1].last + 1; i < len(h.list.Elems); i++ {
		cp.keep = append(cp.keep, i)
	}
}

// size is the number of source bytes a turn spans.
func (t turn) size(list *jsonv.Node) int { return list.Elems[t.last].End - list.Elems[t.first].Start }

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// foldTurn vaults a turn's exact messages and builds its summary and edits.
func (c *Compiler) foldTurn(d *doc, list *jsonv.Node, infos []msgInfo, t turn) fold {
	first, last := list.Elems[t.first], list.Elems[t.last]
	raw := d.src[first.Start:last.End]
	t0 := c.texts.rawText(raw)
	t0.digest = d.keyedID(t0.digest)
	art := artifact.Artifact{Digest: t0.digest, Text: t0.s, Raw: raw, Tool: "turn", Chars: t0.chars}

	line := foldSummary(d, infos, t, art.Digest)
	// The summary says how to get the turn back, as receipts do; the hint
	// depends only on the configuration, so a summary already sent keeps
	// its bytes.
	line = c.opts.Recovery.forDoc(d).receiptHint(line)
	msg := foldMessage(d, line)

	// Every run of non-pinned elements folds: the first becomes the
	// summary, later runs (after a pinned message) are removed with the
	// separator before them. A folded element's session-context parts stay
	// as a message of their own, before the summary in the first run, in
	// place of the run in later ones.
	f := fold{turn: t, summary: msg, art: art}
	placed := false
	for i := t.first; i <= t.last; {
		if infos[i].pinned {
			f.keep = append(f.keep, i)
			i++
			continue
		}
		j := i
		for j+1 <= t.last && !infos[j+1].pinned {
			j++
		}
		var repl []byte
		for k := i; k <= j; k++ {
			if infos[k].preamble != nil {
				if len(repl) > 0 {
					repl = append(repl, ',')
				}
				repl = appendPreamble(repl, d.src, list.Elems[k], infos[k])
				f.keep = append(f.keep, preambleOf(k))
			}
		}
		if !placed {
			if len(repl) > 0 {
				repl = append(repl, ',')
			}
			repl = append(repl, msg...)
			f.keep = append(f.keep, -1)
			placed = true
		}
		if len(repl) > 0 {
			f.edits = append(f.edits, edit{start: list.Elems[i].Start, end: list.Elems[j].End, repl: repl})
		} else {
			f.edits = append(f.edits, edit{start: list.Elems[i-1].End, end: list.Elems[j].End})
		}
		f.size += len(repl)
		i = j + 1
	}
	for k := range f.edits {
		f.edits[k].at = f.edits[k].start
	}
	return f
}

// foldSummary is the summary line of turn t (artifact digest): its first
// user text, its tools with their call counts, its last assistant text,
// each clipped.
func foldSummary(d *doc, infos []msgInfo, t turn, digest artifact.Digest) string {
	var user, assistant string
	var order []string
	counts := map[string]int{}
	for i := t.first; i <= t.last; i++ {
		in := infos[i]
		if i == t.first {
			user = capText(d.src, in.userText)
		}
		if in.assistant {
			if s := capText(d.src, in.assistText); strings.TrimSpace(s) != "" {
				assistant = s
			}
		}
		for _, name := range in.tools {
			if counts[name] == 0 {
				order = append(order, name)
			}
			counts[name]++
		}
	}
	var tools []string
	for i, name := range order {
		if i == summaryMaxTools {
			tools = append(tools, "+"+strconv.Itoa(len(order)-i)+"_more")
			break
		}
		tools = append(tools, artifact.SanitizeTool(name)+"×"+strconv.Itoa(counts[name]))
	}
	return fmt.Sprintf(artifact.FoldPrefix+"%s | messages=%d | user=%s | tools=%s | assistant=%s]",
		artifact.ID(digest), t.last-t.first+1, clip(user, summaryUserChars),
		strings.Join(tools, ","), clip(assistant, summaryAssistantChars))
}

// appendPreamble appends element m with only its session-context parts:
// its bytes with the content list replaced by those parts, byte for byte.
func appendPreamble(dst, src []byte, m *jsonv.Node, in msgInfo) []byte {
	dst = append(dst, src[m.Start:in.content.Start]...)
	dst = append(dst, '[')
	for i, p := range in.preamble {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, p.Raw(src)...)
	}
	dst = append(dst, ']')
	return append(dst, src[in.content.End:m.End]...)
}

// clip quotes the start of s on one line, at most n characters.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > n {
		r := []rune(s)
		s = string(r[:n]) + "…"
	}
	return strconv.Quote(s)
}
