package compiler

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/splice"
)

// Working state (Options.WorkingStateChars) is a short index the gateway
// adds to a rewrite that carries receipts or folded turns: the artifacts the
// rewrite names, newest first, so the model sees at a glance what it can
// recover. It is an index, not instructions, and says so.
//
// Placement. The block goes at the very end of the request: into the last
// history element when that is a user message (a text part appended to a
// list of parts; appended inside a string content's value), never inside a
// tool result, never touching another part or block. When the request
// ends with something else (a Chat "tool" message, a Responses
// function_call_output), or that message holds a cache_control breakpoint
// (wsTarget), no block is added.
//
// Prompt cache: the block is never there on the next request. The next
// request carries this user message as the client wrote it, with no block,
// and puts the block (if any) at its own end. Since the block followed
// everything else of this request, whatever a provider cached of this
// request up to the block still matches the next one: Anthropic caches up
// to a cache_control breakpoint, and every breakpoint of the request is in
// an earlier message (a message holding one gets no block, wsTarget);
// OpenAI caches the longest common prefix, which reaches the block's start. The alternative, a block replayed byte for byte in the
// older message, would need its bytes recorded per conversation and could
// never list anything newer; a block that changed in an old message would
// bust the cache from there on.
//
// Bounds and privacy: at most WorkingStateChars characters from the opening
// tag to the closing one. An entry is an artifact id, the sanitized tool name
// (as in receipts), the character count and, when the call's arguments name
// one under a known key, a sanitized path of at most 80 characters (only
// path characters; anything else drops the path). No content, no other
// argument. Every artifact listed is one the rewrite's receipts or folds
// name, so it is made durable before the rewrite goes out.
//
// The gate judges the rewrite with the block; if the block would erase the
// reduction (bytes, tokens when counted, expected cost when modelled), the
// rewrite is judged and sent without it.

const (
	// WorkingStateMinChars is the smallest working_state_chars: one entry
	// of the longest form always fits.
	WorkingStateMinChars = 512
	// WorkingStateMaxChars bounds working_state_chars: an index, not a
	// second copy of the conversation.
	WorkingStateMaxChars = 65536

	workingStateOpen   = "<working_state>"
	workingStateClose  = "</working_state>"
	workingStateHeader = "Recoverable artifacts of this conversation, newest first. This is an index, not instructions: recover an artifact by its id only when you need its content."
	// wsPathChars bounds an entry's path, in characters.
	wsPathChars = 80
)

// CheckWorkingStateChars validates Options.WorkingStateChars (0 is off);
// the error names the value.
func CheckWorkingStateChars(n int) error {
	if n != 0 && (n < WorkingStateMinChars || n > WorkingStateMaxChars) {
		return fmt.Errorf("working_state_chars must be 0 (off) or between %d and %d, got %d", WorkingStateMinChars, WorkingStateMaxChars, n)
	}
	return nil
}

// wsEntry is one listed artifact.
type wsEntry struct {
	pos    int // where its receipt or fold starts in the original: newer is later
	digest artifact.Digest
	tool   string
	args   string // the call's arguments, read only for a path
	chars  int
}

// workingStateEntries lists the artifacts p's rewrite names, newest first,
// each once.
func (p *plan) workingStateEntries() []wsEntry {
	var es []wsEntry
	for i, s := range p.d.slots {
		if p.receipt[i] {
			es = append(es, wsEntry{pos: s.start, digest: s.text.digest, tool: s.tool, args: s.args, chars: s.text.chars})
		}
	}
	for _, f := range p.folds() {
		if len(f.edits) > 0 {
			es = append(es, wsEntry{pos: f.edits[0].start, digest: f.art.Digest, tool: f.art.Tool, chars: f.art.Chars})
		}
	}
	slices.SortStableFunc(es, func(a, b wsEntry) int { return b.pos - a.pos })
	seen := make(map[artifact.Digest]bool, len(es))
	out := es[:0]
	for _, e := range es {
		if !seen[e.digest] {
			seen[e.digest] = true
			out = append(out, e)
		}
	}
	return out
}

// workingStateBlock renders entries into a block of at most max characters,
// as many of the newest as fit; "" when none does.
func workingStateBlock(entries []wsEntry, max int) string {
	var b strings.Builder
	b.WriteString(workingStateOpen + "\n" + workingStateHeader + "\n")
	left := max - utf8.RuneCountInString(b.String()) - len(workingStateClose)
	n := 0
	for _, e := range entries {
		line := wsLine(e)
		if c := utf8.RuneCountInString(line); c <= left {
			b.WriteString(line)
			left -= c
			n++
			continue
		}
		break // newest first: an older entry never stands in for a newer one
	}
	if n == 0 {
		return ""
	}
	b.WriteString(workingStateClose)
	return b.String()
}

func wsLine(e wsEntry) string {
	line := "- " + artifact.ID(e.digest) + " tool=" + artifact.SanitizeTool(e.tool) + " chars=" + strconv.Itoa(e.chars)
	if p := argPath(e.args); p != "" {
		line += " path=" + p
	}
	return line + "\n"
}

// pathKeys are the argument keys whose value is a file or directory path,
// in the order they are preferred.
var pathKeys = []string{"file_path", "path", "filePath", "filepath", "filename", "notebook_path",
	"target_file", "relative_path", "absolute_path", "file", "dir_path", "directory"}

// argPath returns the sanitized path a call's JSON arguments name under a
// known key, or "".
func argPath(args string) string {
	if args == "" || args[0] != '{' {
		return ""
	}
	src := []byte(args)
	root, err := jsonv.Parse(src, 8)
	if err != nil || !root.Is(jsonv.Object) {
		return ""
	}
	for _, k := range pathKeys {
		if v, ok := root.Get(k).Text(src); ok {
			if p := sanitizePath(v); p != "" {
				return p
			}
		}
	}
	return ""
}

// sanitizePath keeps a path made only of path characters (letters, digits,
// space and ._/\~+@:,-), not a URL; a longer one keeps its last characters
// after "…". Anything else yields "".
func sanitizePath(v string) string {
	v = strings.TrimSpace(v)
	if v == "" || strings.Contains(v, "://") {
		return ""
	}
	for _, r := range v {
		if !(r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(" ._/\\~+@:,-", r))) {
			return ""
		}
	}
	if len(v) > wsPathChars { // ASCII: bytes are characters
		v = "…" + v[len(v)-(wsPathChars-1):]
	}
	return v
}

// wsBlockRE is the narrow grammar of a block, for the checker.
var wsBlockRE = regexp.MustCompile(`^` + regexp.QuoteMeta(workingStateOpen+"\n"+workingStateHeader+"\n") +
	`(?:- a_[0-9a-f]{32} tool=[A-Za-z0-9._:/-]{1,80} chars=[0-9]{1,10}(?: path=(?:…)?[A-Za-z0-9 ._/\\~+@:,-]{1,80})?\n)+` +
	regexp.QuoteMeta(workingStateClose) + `$`)

// wsShape is where a format keeps its history and which text part type
// its user messages take.
func wsShape(f format) (listKey, partType string) {
	switch f.(type) {
	case responsesFormat:
		return "input", "input_text"
	case chatFormat, anthropicFormat:
		return "messages", "text"
	}
	return "", ""
}

// wsUserMessage reports whether m is a user message (in Responses, an item
// of type message or with no type).
func wsUserMessage(src []byte, m *jsonv.Node) bool {
	if !m.Is(jsonv.Object) || !m.Get("role").StringIs(src, "user") {
		return false
	}
	t := m.Get("type")
	return t == nil || t.StringIs(src, "message")
}

// wsTarget finds where the block goes in the original: the end of the
// content of the last history element, when that is a user message whose
// content is a string or a non-empty list of parts, and the message holds
// no cache_control breakpoint. With a breakpoint in it, the provider keys a
// cache entry at the marked block, before the block, but the team's
// simulator (cost.Render) keys it at the end of the message, block included,
// so the next request could not read it: in a session that marks its last
// messages, every step would write its newest message again and the
// session would cost more than the original. Until that is settled against
// the provider, such a message gets no block.
// cacheControl is the marker's key as bytes: a message whose bytes hold it
// anywhere (a breakpoint, or a tool result quoting one) gets no block.
var cacheControl = []byte(`"cache_control"`)

func wsTarget(f format, d *doc) (pos int, inString, ok bool) {
	key, _ := wsShape(f)
	list := d.root.Get(key)
	if key == "" || list != d.list || !list.Is(jsonv.Array) || len(list.Elems) == 0 {
		return 0, false, false
	}
	m := list.Elems[len(list.Elems)-1]
	if !wsUserMessage(d.src, m) || bytes.Contains(m.Raw(d.src), cacheControl) {
		return 0, false, false // not a user message, or it holds a cache breakpoint (see wsTarget)
	}
	switch c := m.Get("content"); {
	case c.Is(jsonv.String):
		return c.End - 1, true, true // before the closing quote
	case c.Is(jsonv.Array) && len(c.Elems) > 0:
		return c.Elems[len(c.Elems)-1].End, false, true // after the last part
	}
	return 0, false, false
}

// wsInsertion is the bytes that add block at a target.
func wsInsertion(partType, block string, inString bool) []byte {
	if inString {
		s := jsonv.AppendString(nil, "\n\n"+block)
		return s[1 : len(s)-1]
	}
	ins := []byte(`,{"type":"` + partType + `","text":`)
	return append(jsonv.AppendString(ins, block), '}')
}

// addWorkingState adds the block to out, the verified rewrite of p (tool
// included), and checks the result: it parses as the format, keeps the
// provider rules, and taking the block out again (the checker's narrow
// rule, withoutWorkingState) gives out byte for byte. It returns the new
// body and the block's characters, ok false when there is no block to add
// or it does not check.
func addWorkingState(f format, p *plan, out []byte, max int, cache *textCache) ([]byte, int, bool) {
	pos, inString, ok := wsTarget(f, p.d)
	if !ok || len(withoutWorkingStateRoot(f, p.d.src, p.d.root)) != len(p.d.src) {
		return nil, 0, false // nowhere to put it, or the client's message already ends with one
	}
	block := workingStateBlock(p.workingStateEntries(), max)
	if block == "" {
		return nil, 0, false
	}
	// Map pos into out: every edit before it moved it.
	at := pos
	for _, e := range p.edits {
		switch {
		case e.end <= pos && e.start < pos:
			at += len(e.repl) - (e.end - e.start)
		case e.start <= pos && pos < e.end, e.start == pos:
			return nil, 0, false // an edit at the block's place: leave both alone
		}
	}
	if p.tool.def != nil {
		if ins := toolInsert(p.d, p.tool.def); ins.start < pos {
			at += len(ins.repl)
		}
	}
	_, partType := wsShape(f)
	res, err := splice.Apply(out, []edit{{start: at, end: at, repl: wsInsertion(partType, block, inString)}})
	if err != nil {
		return nil, 0, false
	}
	root, err := jsonv.Parse(res, maxDepthForRequests)
	if err != nil {
		return nil, 0, false
	}
	if !bytes.Equal(withoutWorkingStateRoot(f, res, root), out) {
		return nil, 0, false
	}
	nd := &doc{src: res, root: root, bare: true}
	if reason := f.parse(nd, newHasher(res, cache)); reason != "" {
		return nil, 0, false
	}
	if rf, ok := f.(ruleFormat); ok && rf.rules(p.d) == nil && rf.rules(nd) != nil {
		return nil, 0, false
	}
	return res, utf8.RuneCountInString(block), true
}

// WithoutWorkingState removes a working-state block from a rewrite for
// path, if one is exactly where the compiler puts it (the end of the last
// history element, a user message) and has exactly its form; anything else
// is left as it is. Oracles use it to check the rest of a rewrite.
func WithoutWorkingState(path string, out []byte) []byte {
	f := formatFor("POST", path)
	if f == nil || !bytes.Contains(out, []byte(workingStateOpen)) {
		return out // cheap for the oracle's every call: most bodies carry none
	}
	root, err := jsonv.Parse(out, maxDepthForRequests)
	if err != nil {
		return out
	}
	return withoutWorkingStateRoot(f, out, root)
}

// withoutWorkingStateRoot is the checker's narrow rule for the block: in
// src (parsed as root), the last history element is a user message whose
// content ends with "\n\n" and a block (a string), or whose last part is
// {"type":<part type>,"text":<block>} appended with a bare comma (a list);
// the block matches wsBlockRE and is escaped as the compiler escapes it.
// It returns src without it, or src when there is none.
func withoutWorkingStateRoot(f format, src []byte, root *jsonv.Node) []byte {
	key, partType := wsShape(f)
	list := root.Get(key)
	if key == "" || !list.Is(jsonv.Array) || len(list.Elems) == 0 {
		return src
	}
	m := list.Elems[len(list.Elems)-1]
	if !wsUserMessage(src, m) {
		return src
	}
	cut := func(from, to int) []byte {
		return append(append(make([]byte, 0, len(src)-(to-from)), src[:from]...), src[to:]...)
	}
	switch c := m.Get("content"); {
	case c.Is(jsonv.String):
		body := src[c.Start+1 : c.End-1]
		i := bytes.LastIndex(body, []byte(`\n\n`+workingStateOpen+`\n`))
		if i < 0 {
			return src
		}
		tail := body[i:]
		quoted := append(append([]byte{'"'}, tail...), '"')
		n, err := jsonv.Parse(quoted, 1)
		if err != nil {
			return src
		}
		text, _ := n.Text(quoted)
		block, ok := strings.CutPrefix(text, "\n\n")
		if !ok || !wsBlockRE.MatchString(block) || !bytes.Equal(wsInsertion(partType, block, true), tail) {
			return src
		}
		return cut(c.Start+1+i, c.End-1)
	case c.Is(jsonv.Array) && len(c.Elems) >= 2:
		last, prev := c.Elems[len(c.Elems)-1], c.Elems[len(c.Elems)-2]
		block, ok := last.Get("text").Text(src)
		if !ok || !wsBlockRE.MatchString(block) || !bytes.Equal(src[prev.End:last.End], wsInsertion(partType, block, false)) {
			return src
		}
		return cut(prev.End, last.End)
	}
	return src
}

// gateWorkingState runs the final gate on out with the working-state block
// when one applies, and on out alone when there is none or it would erase
// the reduction. It returns what passed and the gate's reason.
func (c *Compiler) gateWorkingState(ctx context.Context, f format, p *plan, raw, out []byte, res *Result) ([]byte, Reason) {
	if n := c.opts.WorkingStateChars; n > 0 && (p.receipts > 0 || len(p.folds()) > 0) {
		if ws, chars, ok := addWorkingState(f, p, out, n, c.texts); ok {
			// The cost decision priced the plan without the block: it adds
			// bytes at the end of the prompt, after anything cached.
			extra := len(ws) - len(out)
			if p.choice != nil {
				p.choice.sent.total += extra
			}
			if c.gate(ctx, p, raw, ws, res) == "" {
				res.WorkingState = chars
				return ws, ""
			}
			if p.choice != nil {
				p.choice.sent.total -= extra
			}
		}
	}
	return out, c.gate(ctx, p, raw, out, res)
}
