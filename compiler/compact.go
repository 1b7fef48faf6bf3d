package compiler

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tokenterminator/caddy-token-terminator/compiler/jsonv"
)

// compactBlock is how many turns move into the compacted prefix at once.
// Compaction changes the bytes of a request where the compacted prefix ends,
// which busts the provider's prompt cache from that point on. The vault and
// fold boundaries are computed from the turn count rounded down to a
// multiple of compactBlock, so both move together once every compactBlock
// turns; in between, every request carries the same compacted prefix.
const compactBlock = 4

// FoldPrefix starts every folded-turn summary.
const FoldPrefix = "[Token Terminator folded turn "

// Summary bounds, in characters.
const (
	summaryUserChars      = 100
	summaryAssistantChars = 160
	summaryMaxTools       = 8
)

// turnFormat is implemented by formats whose history compaction knows.
type turnFormat interface {
	// history returns the list that holds the conversation (messages or
	// input items) and the index of its first element in doc.units.
	history(d *doc) (list *jsonv.Node, offset int)
	// describe reads one history element.
	describe(d *doc, m *jsonv.Node) msgInfo
}

// msgInfo is what compaction needs to know of one history element.
type msgInfo struct {
	turnStart bool     // carries the person's own input
	pinned    bool     // system/developer: stays where it is
	assistant bool     // produced by the model
	user      string   // the person's input text, if turnStart
	text      string   // the assistant's text, if assistant
	tools     []string // names of tools called
	calls     []string // tool call ids opened
	results   []string // tool call ids answered
}

// turn is a run of history elements from one turn start to the next.
type turn struct {
	first, last int // indexes into the history list, inclusive
}

// fold is one old turn replaced by a summary message.
type fold struct {
	turn    turn
	summary []byte // the whole replacement message, JSON
	art     Artifact
	edits   []edit
}

// compaction is the compaction plan of one request.
type compaction struct {
	list     *jsonv.Node
	offset   int
	vaulted  []bool // per slot: receipted by compaction
	inFolded []bool // per slot: inside a folded turn
	folds    []fold
	keep     []int // for each output history element: original index, or -1 for a summary
}

// compact plans context compaction: old large tool results become receipts
// and turns older than CollapseAfterTurns become summaries. The last
// InlineRecentTurns turns, and any tool result the model has not answered
// yet, are never touched.
func (c *Compiler) compact(p *plan, tf turnFormat) *compaction {
	opt := c.opts.Compaction
	d := p.d
	list, offset := tf.history(d)
	if list == nil || len(list.Elems) == 0 {
		return nil
	}
	infos := make([]msgInfo, len(list.Elems))
	var turns []turn
	lastAssistant := -1
	for i, m := range list.Elems {
		infos[i] = tf.describe(d, m)
		if infos[i].turnStart {
			turns = append(turns, turn{first: i, last: i})
		} else if len(turns) > 0 {
			turns[len(turns)-1].last = i
		}
		if infos[i].assistant {
			lastAssistant = i
		}
	}
	if len(turns) == 0 {
		return nil
	}
	cp := &compaction{list: list, offset: offset, vaulted: make([]bool, len(d.slots)), inFolded: make([]bool, len(d.slots))}

	// Both boundaries move together, only when the turn count crosses a
	// multiple of compactBlock; they never enter the guaranteed windows.
	aligned := len(turns) / compactBlock * compactBlock

	// Old tool results: every slot in a turn before the recent window.
	vaultTurns := max(0, aligned-opt.InlineRecentTurns)
	if vaultTurns > 0 {
		end := turns[vaultTurns-1].last // last element of the vaulted turns
		for i, s := range d.slots {
			el := s.unit - offset
			if el < 0 || el > end || el > lastAssistant || p.replace[i] {
				continue
			}
			if s.text.chars >= opt.MinVaultChars && s.text.chars <= c.opts.MaxArtifactChars {
				cp.vaulted[i] = true
			}
		}
	}

	// Old turns: fold a prefix of turns, never splitting a tool call from
	// its result (a turn that answers the previous turn's calls goes with it).
	foldTurns := 0
	if opt.CollapseAfterTurns > 0 {
		foldTurns = max(0, aligned-opt.CollapseAfterTurns)
	}
	for foldTurns > 0 && !cleanBoundary(infos, turns[foldTurns-1].last+1) {
		foldTurns--
	}
	// A turn shorter than its summary stays inline: that depends only on the
	// turn's own bytes, so the decision is as sticky as folding itself.
	folded := make([]bool, foldTurns)
	for t := 0; t < foldTurns; t++ {
		f := c.foldTurn(d, list, infos, turns[t])
		if len(f.summary) < turns[t].size(list) {
			folded[t] = true
			cp.folds = append(cp.folds, f)
		}
	}
	if len(cp.folds) == 0 {
		return cp
	}
	for i, s := range d.slots {
		el := s.unit - offset
		for t := 0; t < foldTurns; t++ {
			if folded[t] && el >= turns[t].first && el <= turns[t].last {
				cp.inFolded[i] = true
				cp.vaulted[i] = false
			}
		}
	}
	// The output history: the preamble, then per folded turn its summary
	// and its pinned messages, every other element unchanged.
	cp.keep = seq(turns[0].first)
	for t := 0; t < foldTurns; t++ {
		if folded[t] {
			cp.keep = append(cp.keep, -1)
		}
		for i := turns[t].first; i <= turns[t].last; i++ {
			if !folded[t] || infos[i].pinned {
				cp.keep = append(cp.keep, i)
			}
		}
	}
	for i := turns[foldTurns-1].last + 1; i < len(list.Elems); i++ {
		cp.keep = append(cp.keep, i)
	}
	return cp
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

// cleanBoundary reports whether no tool call opened before element at is
// answered at or after it.
func cleanBoundary(infos []msgInfo, at int) bool {
	open := map[string]bool{}
	for i := 0; i < at && i < len(infos); i++ {
		for _, id := range infos[i].calls {
			open[id] = true
		}
		for _, id := range infos[i].results {
			delete(open, id)
		}
	}
	if len(open) == 0 {
		return true
	}
	for i := at; i < len(infos); i++ {
		for _, id := range infos[i].results {
			if open[id] {
				return false
			}
		}
		for _, id := range infos[i].calls {
			delete(open, id) // a reused id opens a new call
		}
	}
	return true
}

// foldTurn vaults a turn's exact messages and builds its summary and edits.
func (c *Compiler) foldTurn(d *doc, list *jsonv.Node, infos []msgInfo, t turn) fold {
	first, last := list.Elems[t.first], list.Elems[t.last]
	raw := d.src[first.Start:last.End]
	art := Artifact{Text: string(raw), Raw: raw, Tool: "turn", Chars: utf8.RuneCount(raw)}
	art.Digest = newText(art.Text).digest

	var user, assistant string
	var order []string
	counts := map[string]int{}
	for i := t.first; i <= t.last; i++ {
		in := infos[i]
		if i == t.first {
			user = in.user
		}
		if in.assistant && strings.TrimSpace(in.text) != "" {
			assistant = in.text
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
		tools = append(tools, SanitizeTool(name)+"×"+strconv.Itoa(counts[name]))
	}
	line := fmt.Sprintf(FoldPrefix+"%s | messages=%d | user=%s | tools=%s | assistant=%s]",
		ArtifactID(art.Digest), t.last-t.first+1, clip(user, summaryUserChars),
		strings.Join(tools, ","), clip(assistant, summaryAssistantChars))
	msg := append([]byte(`{"role":"user","content":`), jsonv.AppendString(nil, line)...)
	msg = append(msg, '}')

	// The first run of non-pinned elements becomes the summary; later runs
	// (after a pinned system message) are removed with the separator before
	// them.
	f := fold{turn: t, summary: msg, art: art}
	placed := false
	for i := t.first; i <= t.last; {
		if infos[i].pinned {
			i++
			continue
		}
		j := i
		for j+1 <= t.last && !infos[j+1].pinned {
			j++
		}
		if !placed {
			f.edits = append(f.edits, edit{start: list.Elems[i].Start, end: list.Elems[j].End, repl: msg})
			placed = true
		} else {
			f.edits = append(f.edits, edit{start: list.Elems[i-1].End, end: list.Elems[j].End})
		}
		i = j + 1
	}
	return f
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
