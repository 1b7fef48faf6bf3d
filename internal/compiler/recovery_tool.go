package compiler

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
	"github.com/tokenterminator/caddy-token-terminator/internal/splice"
)

// Recovery configures how a rewrite tells the model to get vaulted content
// back. The compiler knows no recovery tool itself (package recovery
// defines it and answers its calls): the gateway hands it the hint and the
// definitions, so every receipt and tools array stays a pure function of
// the configuration and the request (determinism).
type Recovery struct {
	// Hint is appended to every receipt and folded-turn summary as
	// " | recover: <Hint>"; "" adds nothing.
	Hint string
	// ToolName is the recovery tool's name. A request whose own tools
	// already name it is offered no tool (Result.ToolConflict).
	ToolName string
	// Tools holds, per format, the tool's definition: one element of the
	// request's tools array, appended after the client's tools. It is added
	// to a rewrite that carries receipts or folded turns, and to every later
	// rewrite of a conversation once it was sent (sticky: a tools array that
	// toggles would bust the provider's prompt cache). Empty: no tool.
	Tools ToolDefinitions
	// ConflictHint replaces Hint in a request that is offered no tool
	// although Tools has one: its own tools already name ToolName, or its
	// tools are not an array (the artifact API's path, say).
	ConflictHint string

	conflict bool // set by forDoc: the client's tools name ours
}

// forDoc is the recovery a request gets. A request whose own tools already
// name ours (or whose tools are not an array) is offered no tool, and its
// receipts and summaries carry ConflictHint, so they never point the
// model at a tool that is not ours.
func (r Recovery) forDoc(d *doc) Recovery {
	if r.Tools == (ToolDefinitions{}) {
		return r
	}
	if d.noTool || (r.Tools.Gemini == "" && d.geminiDoc()) {
		// No tool may go out, or none is defined for the format: the
		// receipts name the API rather than a tool the model lacks.
		r.Hint, r.Tools = r.ConflictHint, ToolDefinitions{}
		return r
	}
	t := d.root.Get("tools")
	if t == nil {
		return r
	}
	if t.Is(jsonv.Array) {
		for _, e := range t.Elems {
			if toolNames(d.src, e, r.ToolName) {
				r.conflict = true
			}
		}
		if !r.conflict {
			return r
		}
	}
	r.Hint, r.Tools = r.ConflictHint, ToolDefinitions{}
	return r
}

// ToolDefinitions is the recovery tool's definition in each format's
// shape. Strings keep Options comparable.
type ToolDefinitions struct {
	Chat, Responses, Anthropic string
	// Gemini is one element of a Gemini tools array: a Tool holding one
	// functionDeclarations entry, after the client's tools.
	Gemini string
}

// of returns the definition for a format name, nil for none.
func (t ToolDefinitions) of(format provider.Format) []byte {
	var s string
	switch format {
	case provider.Chat:
		s = t.Chat
	case provider.Responses:
		s = t.Responses
	case provider.Anthropic:
		s = t.Anthropic
	case geminiName:
		s = t.Gemini
	}
	if s == "" {
		return nil
	}
	return []byte(s)
}

// receiptHint appends the recovery hint to a receipt.
func (r Recovery) receiptHint(receipt string) string {
	if r.Hint == "" {
		return receipt
	}
	return strings.TrimSuffix(receipt, "]") + " | recover: " + r.Hint + "]"
}

// toolPlan is the recovery tool's part of a plan.
type toolPlan struct {
	def      []byte // the definition to append; nil: none
	conflict bool   // the client's tools already name ours
	sticky   bool   // the conversation was sent the tool before
}

// planTool decides whether p's rewrite carries the recovery tool: it does
// when the rewrite receipts or folds something, or the conversation has
// been sent the tool before, unless the request is offered none
// (Recovery.forDoc: the client's tools already name it). A plan without
// edits goes out as the original, so it carries none (and is priced so).
func (c *Compiler) planTool(format provider.Format, p *plan) toolPlan {
	tp := toolPlan{sticky: toolSent(p.lineage.Cache)}
	if len(p.edits) == 0 || (p.receipts == 0 && len(p.folds()) == 0 && !tp.sticky) {
		return tp
	}
	tp.conflict = p.recovery.conflict
	tp.def = p.recovery.Tools.of(format)
	return tp
}

// toolMark marks the fingerprint of every rendered segment of a prompt
// that carries the recovery tool.
const toolMark = 0x7e57001

// withTool lays out and prices plan p with its recovery tool, given p's
// rendered segments without it. Tools render first (Anthropic and OpenAI
// alike), so the definition appended to them shifts every byte after the
// client's tools: held, what the provider holds once p went out, marks
// every segment and moves its end by the insertion's bytes (without
// breakpoints, as at OpenAI, the client's tools stay a cached prefix of
// their own). billed is what the provider bills for p: against a state
// recorded without the tool, the whole prompt is written again; against one
// recorded with it, the prefix is read, and the original (no tool) is the
// plan that loses it.
//
// judged is what the decision and the gate compare. It is billed, except at
// the tool's first appearance in a conversation: then the bust is judged as
// already paid. The first rewrite of a conversation is the cheapest moment
// the tool can ever be introduced (the strict gate lets no request carry
// it before something is receipted, and the prompt it re-writes only grows
// later), and every later receipt depends on it; a horizon of a few
// requests at cache-read prices never pays back a full re-write, so judging
// it there would keep every warm conversation raw. Once sent, the tool is
// priced in full: dropping it (the original) or bringing it back after a
// fail-open pays the re-write.
func (ch *choice) withTool(p *plan, segs []seg) (held []seg, judged, billed costPlan) {
	judged = ch.costOf(segs)
	if p.tool.def == nil {
		return segs, judged, judged
	}
	n := len(toolInsert(p.d, p.tool.def).repl)
	held = make([]seg, 0, len(segs)+1)
	if !ch.model.Breakpoints && len(segs) > 0 && segs[0].end > 0 {
		held = append(held, seg{fp: segs[0].fp, end: segs[0].end - 1}) // the client's tools, up to their closing bracket
	}
	for _, g := range segs {
		held = append(held, seg{fp: mix(g.fp, toolMark), end: g.end + n})
	}
	billed = ch.costOf(held)
	if p.tool.sticky {
		return held, billed, billed
	}
	judged.total = billed.total
	return held, judged, billed
}

// roundAfter is the recovery round plan p, priced as cp, is expected to
// cause, as the follow-up request the gateway would send (zero: none): p
// keeps as receipts artifacts the model recovered while answering the
// previous request. The model needed them, so it is expected to ask once
// more; the follow-up re-sends p's prompt (read from the cache: it was just
// sent) with their content added (written, and gone again from the next
// request, which the client sends without it). The plans that carry them
// inline instead pay their own cost (the prefix re-written from where they
// are, their bytes on every later request): the decision weighs the two.
func (ch *choice) roundAfter(p *plan, cp costPlan) costPlan {
	if ch.prev == nil || len(ch.prev.recovered) == 0 {
		return costPlan{}
	}
	// With ReinlineOn no plan keeps a recovered result as a receipt (only a
	// recovered folded turn is left to weigh); with ReinlineOff no state
	// records a recovery.
	content := 0
	counted := map[artifact.Digest]bool{}
	add := func(d artifact.Digest, n int) {
		if !counted[d] && ch.prev.wasRecovered(d) {
			counted[d] = true
			content += n
		}
	}
	for i, s := range p.d.slots {
		if p.receipt[i] && !p.reinline(s.text.digest) { // an older copy of one carried inline costs no round
			add(s.text.digest, s.end-s.start)
		}
	}
	for _, f := range p.folds() {
		add(f.art.Digest, len(f.art.Raw))
	}
	if content == 0 {
		return costPlan{}
	}
	return costPlan{total: cp.total + content, cached: cp.total}
}

// Recovery's part of the cache state, after the receipted digests: one
// flags byte (absent: neither), then, with stateRecovered, the recovered
// digests as a count and their first 8 bytes each. States recorded when
// the byte could only be 1 (the tool flag) read the same.
const (
	stateTool      = 1 << 0 // cacheState.tool
	stateRecovered = 1 << 1 // cacheState.recovered follows
)

func appendRecoveryState(b []byte, s *cacheState) []byte {
	var flags byte
	if s.tool {
		flags |= stateTool
	}
	if len(s.recovered) > 0 {
		flags |= stateRecovered
	}
	if flags == 0 {
		return b
	}
	b = append(b, flags)
	if flags&stateRecovered != 0 {
		b = binary.AppendUvarint(b, uint64(len(s.recovered)))
		for _, r := range s.recovered {
			b = binary.LittleEndian.AppendUint64(b, r)
		}
	}
	return b
}

// parseRecoveryState reads recovery's part into s and returns what is left
// after it; a malformed part is left whole, for the caller to refuse.
func parseRecoveryState(b []byte, s *cacheState) []byte {
	if len(b) == 0 {
		return b
	}
	flags, rest := b[0], b[1:]
	if flags == 0 || flags&^(stateTool|stateRecovered) != 0 {
		return b
	}
	var recovered []uint64
	if flags&stateRecovered != 0 {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n == 0 || n > uint64(len(rest)-k)/8 {
			return b
		}
		rest = rest[k:]
		recovered = make([]uint64, n)
		for i := range recovered {
			recovered[i] = binary.LittleEndian.Uint64(rest)
			rest = rest[8:]
		}
	}
	s.tool, s.recovered = flags&stateTool != 0, recovered
	return rest
}

func (s *cacheState) wasRecovered(d artifact.Digest) bool {
	if s == nil {
		return false
	}
	_, ok := slices.BinarySearch(s.recovered, short(d))
	return ok
}

// recoveredState is the recovered digests a forwarded plan's state
// records: what the model recovered while answering it, sorted.
func recoveredState(p *plan) []uint64 {
	var out []uint64
	for d := range p.recovered {
		out = append(out, short(d))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// keepStickyRewrite is the state of a conversation that was sent the tool
// when a request went out as the original anyway (fail open, the gate
// refused, or nothing to rewrite): the provider still holds the prefix of
// the last rewrite for the TTL, so st goes on describing that rewrite (its
// segments, boundary, receipts and time) and the next request's stable
// plan replays it, tool included, instead of paying to bring the tool back.
func keepStickyRewrite(st, prev *cacheState) {
	if prev == nil || !prev.tool || prev.aligned < 0 {
		return
	}
	st.at, st.aligned, st.segs, st.bps, st.receipted = prev.at, prev.aligned, prev.segs, prev.bps, prev.receipted
}

// toolNames reports whether a tools element names name, in any format's
// shape (name, function.name, custom.name).
func toolNames(src []byte, t *jsonv.Node, name string) bool {
	if fds := t.Get("functionDeclarations"); fds.Is(jsonv.Array) { // Gemini
		for _, fd := range fds.Elems {
			if fd.Get("name").StringIs(src, name) {
				return true
			}
		}
	}
	return t.Get("name").StringIs(src, name) ||
		t.Get("function").Get("name").StringIs(src, name) ||
		t.Get("custom").Get("name").StringIs(src, name)
}

// toolSent reads the sticky flag from a recorded cache state.
func toolSent(cache []byte) bool {
	s := decodeCacheState(cache)
	return s != nil && s.tool
}

// toolInsert returns the insertion that appends def to d's tools array (or
// adds a tools array holding only def at the end of the object). It never
// overlaps another edit: no pass edits inside tools.
func toolInsert(d *doc, def []byte) edit {
	if t := d.root.Get("tools"); t != nil {
		ins := def
		if len(t.Elems) > 0 {
			ins = append([]byte{','}, def...)
		}
		return edit{start: t.End - 1, end: t.End - 1, repl: ins}
	}
	ins := []byte(`"tools":[`)
	if len(d.root.Members) > 0 {
		ins = []byte(`,"tools":[`)
	}
	ins = append(append(ins, def...), ']')
	return edit{start: d.root.End - 1, end: d.root.End - 1, repl: ins}
}

var errToolCheck = errors.New("compiler: the recovery tool edit is not where it belongs")

// addTool splices the tool's insertion into out, the verified rewrite of
// p's edits (root is its parsed tree, tools as in the original: no pass
// edits them). The result is valid by construction, so it is not parsed
// again: def is one JSON value (checked here), it goes in just before the
// closing bracket of out's tools array (after a comma when the array has
// elements) or as a new last member "tools" of a root object that has
// none, and nothing else changes, so the messages the format's parse and
// provider rules read are the verified ones. out is given up: the
// insertion goes into its spare capacity when it has room (rewrite
// reserves it).
func addTool(out []byte, root *jsonv.Node, def []byte) ([]byte, error) {
	if !root.Is(jsonv.Object) {
		return nil, errToolCheck
	}
	if _, err := jsonv.Parse(def, maxDepthForRequests); err != nil {
		return nil, fmt.Errorf("%w: %v", errToolCheck, err)
	}
	if t := root.Get("tools"); t != nil && !t.Is(jsonv.Array) {
		return nil, errToolCheck
	}
	ins := toolInsert(&doc{src: out, root: root}, def)
	if c := out[ins.start]; c != ']' && c != '}' {
		return nil, errToolCheck
	}
	return splice.Insert(out, ins.start, ins.repl)
}

// stickyTool is the tool flag a conversation's next state records: set
// once a rewrite carrying the tool went out, and kept through requests that
// went out as the original (their bytes had no tool, but the next rewrite
// must carry it again rather than toggle between two tools arrays).
func stickyTool(p *plan, prev *cacheState, forwarded bool) bool {
	return (forwarded && p.tool.def != nil) || (prev != nil && prev.tool)
}

// hintRE finds a receipt's recovery hint: after the receipt's "…" (and
// its same_as part), up to the closing bracket.
var hintRE = regexp.MustCompile(`(…(?: \| same_as=[^"\]\\]*)?) \| recover: [^"\]\\]*\]`)

// foldHintRE finds a folded-turn summary's recovery hint: at the end of
// the summary's JSON string, after its quoted assistant text.
var foldHintRE = regexp.MustCompile(`(` + regexp.QuoteMeta(artifact.FoldPrefix) + `a_[0-9a-f]+ (?:[^"\\]|\\.)*\\") \| recover: [^"\]\\]*\]"`)

// WithoutRecovery undoes what recovery adds to a rewrite out of orig: the
// tool definition appended to the tools array (or the tools member added
// at the end of the object) and the hints of receipts and fold summaries. Oracles use
// it to check the rest of a rewrite as if recovery were off; the compiler
// checks the tool edit itself (addTool).
func WithoutRecovery(orig, out []byte) []byte {
	out = hintRE.ReplaceAll(out, []byte("${1}]"))
	out = foldHintRE.ReplaceAll(out, []byte(`${1}]"`))
	oroot, err1 := jsonv.Parse(orig, maxDepthForRequests)
	root, err2 := jsonv.Parse(out, maxDepthForRequests)
	if err1 != nil || err2 != nil || !root.Is(jsonv.Object) {
		return out
	}
	t := root.Get("tools")
	if !t.Is(jsonv.Array) || len(t.Elems) == 0 {
		return out
	}
	last := t.Elems[len(t.Elems)-1]
	switch ot := oroot.Get("tools"); {
	case ot == nil:
		// The whole member was added before the object's closing brace.
		key := []byte(`"tools":`)
		i := bytes.LastIndex(out[:t.Start], key)
		if i < 0 || len(t.Elems) != 1 || strings.TrimSpace(string(out[t.End:])) != "}" {
			return out
		}
		if j := bytes.LastIndexByte(out[:i], ','); j >= 0 && strings.TrimSpace(string(out[j+1:i])) == "" {
			i = j
		}
		return append(append([]byte{}, out[:i]...), out[t.End:]...)
	case ot.Is(jsonv.Array) && len(ot.Elems)+1 == len(t.Elems):
		from := last.Start
		if len(t.Elems) > 1 {
			from = t.Elems[len(t.Elems)-2].End
		}
		return append(append([]byte{}, out[:from]...), out[last.End:]...)
	}
	return out
}

// CheckReinlineRecovered refuses a ReinlineRecovered value, naming it.
func CheckReinlineRecovered(v string) error {
	switch v {
	case "", ReinlineOn, ReinlineCost, ReinlineOff:
		return nil
	}
	return fmt.Errorf("reinline_recovered must be on, cost or off, got %q", v)
}
