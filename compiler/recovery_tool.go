package compiler

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/compiler/jsonv"
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
}

// ToolDefinitions is the recovery tool's definition in each format's
// shape. Strings keep Options comparable.
type ToolDefinitions struct {
	Chat, Responses, Anthropic string
}

// of returns the definition for a format name, nil for none.
func (t ToolDefinitions) of(format string) []byte {
	var s string
	switch format {
	case chatFormat{}.name():
		s = t.Chat
	case responsesFormat{}.name():
		s = t.Responses
	case anthropicFormat{}.name():
		s = t.Anthropic
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
// been sent the tool before, unless the client's tools already name it.
func (c *Compiler) planTool(f format, p *plan) toolPlan {
	def := c.opts.Recovery.Tools.of(f.name())
	if def == nil {
		return toolPlan{}
	}
	tp := toolPlan{sticky: toolSent(p.lineage.Cache)}
	if p.receipts == 0 && len(p.folds()) == 0 && !tp.sticky {
		return tp
	}
	if t := p.d.root.Get("tools"); t != nil {
		if !t.Is(jsonv.Array) {
			return tp // odd shape: offer nothing
		}
		for _, e := range t.Elems {
			if toolNames(p.d.src, e, c.opts.Recovery.ToolName) {
				tp.conflict = true
				return tp
			}
		}
	}
	tp.def = def
	return tp
}

// toolNames reports whether a tools element names name, in any format's
// shape (name, function.name, custom.name).
func toolNames(src []byte, t *jsonv.Node, name string) bool {
	return t.Get("name").StringIs(src, name) ||
		t.Get("function").Get("name").StringIs(src, name) ||
		t.Get("custom").Get("name").StringIs(src, name)
}

// toolSent reads the sticky flag from a recorded cache state.
func toolSent(cache []byte) bool {
	s := decodeCacheState(cache)
	return s != nil && s.tool
}

// toolInsert returns the insertion that appends def to the original's tools
// array (or adds a tools array holding only def at the end of the object).
// It never overlaps another edit: no pass edits inside tools.
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
// p's edits, and checks the result: it parses as the format, passes the
// provider rules, and its tools array ends in def exactly.
func addTool(f format, p *plan, out []byte, def []byte, cache *textCache) ([]byte, error) {
	ins := toolInsert(p.d, def)
	at := ins.start
	for _, e := range p.edits {
		if e.start < ins.start {
			at += len(e.repl) - (e.end - e.start)
		}
	}
	res, err := splice(out, []edit{{start: at, end: at, repl: ins.repl}})
	if err != nil {
		return nil, err
	}
	root, err := jsonv.Parse(res, maxDepthForRequests)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errToolCheck, err)
	}
	t := root.Get("tools")
	if !t.Is(jsonv.Array) || len(t.Elems) == 0 || string(t.Elems[len(t.Elems)-1].Raw(res)) != string(def) {
		return nil, errToolCheck
	}
	nd := &doc{src: res, root: root}
	if reason := f.parse(nd, newHasher(res, cache)); reason != "" {
		return nil, fmt.Errorf("%w: %s", errToolCheck, reason)
	}
	if rf, ok := f.(ruleFormat); ok && rf.rules(p.d) == nil {
		if err := rf.rules(nd); err != nil {
			return nil, err
		}
	}
	return res, nil
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
var foldHintRE = regexp.MustCompile(`(` + regexp.QuoteMeta(FoldPrefix) + `a_[0-9a-f]+ (?:[^"\\]|\\.)*\\") \| recover: [^"\]\\]*\]"`)

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
