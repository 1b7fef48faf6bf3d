package compiler

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// anthropicFormat is Anthropic Messages (POST /v1/messages): units are the
// system prompt (when present, as unit 0) and the messages; slots are the
// contents of tool_result blocks in user messages when they are a string or
// a list of plain text blocks.
//
// The receipt replaces only the content value, so type, tool_use_id,
// is_error and cache_control of the block stay exactly as sent. Never
// touched: system, tools, thinking and redacted_thinking blocks (their
// signatures must round-trip byte for byte), server_tool_use and every
// server *_tool_result block, images, documents, and tool_result blocks
// that carry anything but text. context_management is judged edit by edit
// (see contextManagementCompatible) and, when compiled, kept byte for byte.
type anthropicFormat struct{}

func (anthropicFormat) name() provider.Format { return provider.Anthropic }

const (
	anthToolUse    = "tool_use"
	anthToolResult = "tool_result"
	// anthropicMaxBreakpoints is the API's limit of cache_control
	// breakpoints per request (more is a 400).
	anthropicMaxBreakpoints = 4
)

// parse walks the messages once: slots, the calls they answer, and each
// message's history description. A user message starts a turn when it
// carries the person's own input (string content, or any block that is not
// a tool_result and not client session context); a user message holding
// only tool results continues the turn, and one holding only session
// context (<system-reminder> blocks) is pinned.
func (anthropicFormat) parse(d *doc, h *hasher) Reason {
	src := d.src
	if !d.root.Is(jsonv.Object) {
		return ReasonUnknownShape
	}
	if cm := d.root.Get("context_management"); cm != nil && !contextManagementCompatible(src, cm) {
		return ReasonProviderContextManagement
	}
	msgs := d.root.Get("messages")
	if !msgs.Is(jsonv.Array) {
		return ReasonUnknownShape
	}
	d.model, _ = d.root.Get("model").Text(src)
	if sys := d.root.Get("system"); sys != nil && sys.Kind != jsonv.Null {
		d.units = append(d.units, sys)
	}
	base := len(d.units)
	d.units = append(d.units, msgs.Elems...)
	d.setHistory(msgs, base)
	// tool_use ids are unique per conversation for Anthropic itself, but
	// gateways translating from other formats may reuse them; a result is
	// matched with the most recent tool_use of its id.
	calls := map[string]toolCall{}
	for i, m := range msgs.Elems {
		if !m.Is(jsonv.Object) {
			return ReasonUnknownShape
		}
		in := d.info(i)
		content := m.Get("content")
		switch role := m.Get("role"); {
		case role.StringIs(src, "user"):
			in.turnStart = in.readUser(src, content, "text", func(b *jsonv.Node) bool {
				if !b.Get("type").StringIs(src, anthToolResult) {
					return false
				}
				id, _ := b.Get("tool_use_id").Text(src)
				in.answer(id)
				d.addResult(h, base+i, b.Get("content"), "text", callFor(calls, src, b.Get("tool_use_id")))
				return true
			})
		case role.StringIs(src, "system"):
			// Claude Code 2.x sends its environment (cwd, platform, git
			// state) as a role "system" message after the first user
			// message: session context, pinned like Chat's system messages.
			in.pinned = true
		case role.StringIs(src, "assistant"):
			in.assistant = true
			in.assistText = textRef{content, "text"}
			if !content.Is(jsonv.Array) {
				break
			}
			for _, b := range content.Elems {
				if !b.Get("type").StringIs(src, anthToolUse) {
					continue
				}
				name, _ := b.Get("name").Text(src)
				id, ok := b.Get("id").Text(src)
				in.call(name, id)
				if !ok {
					continue
				}
				args := ""
				if in := b.Get("input"); in != nil {
					args = string(in.Raw(src))
				}
				calls[id] = toolCall{name, args}
			}
		}
	}
	return ""
}

// check verifies the Anthropic rules on a rewrite, compared with the
// original: everything outside messages byte-identical; every block other
// than a user tool_result byte-identical (thinking signatures, server tool
// blocks, images, documents), and of a tool_result every member but content;
// tool_use / tool_result pairing (results in the immediately following user
// message, before any other block) unchanged; the same cache_control
// breakpoints at the same places, or one more on a receipt
// (receipt_breakpoint.go).
func (anthropicFormat) check(orig, out *doc) error {
	if err := sameOutside(orig, out, "messages"); err != nil {
		return fmt.Errorf("anthropic: %w", err)
	}
	om, nm := orig.root.Get("messages"), out.root.Get("messages")
	if len(om.Elems) != len(nm.Elems) {
		return fmt.Errorf("anthropic: messages changed")
	}
	for i, a := range om.Elems {
		if err := anthSameBlocks(orig.src, a, out.src, nm.Elems[i]); err != nil {
			return fmt.Errorf("anthropic: message %d: %w", i, err)
		}
	}
	if po, err := anthPairing(orig.src, om); err == nil {
		pn, err := anthPairing(out.src, nm)
		if err != nil {
			return err
		}
		if po != pn {
			return fmt.Errorf("anthropic: tool pairing changed")
		}
	}
	var co, cn []breakpoint
	cacheBreakpoints(orig.src, orig.root, nil, &co)
	cacheBreakpoints(out.src, out.root, nil, &cn)
	return checkAddedBreakpoint(co, cn, anthropicMaxBreakpoints)
}

// anthSameBlocks compares the content blocks of one message.
func anthSameBlocks(as []byte, a *jsonv.Node, bs []byte, b *jsonv.Node) error {
	ca, cb := a.Get("content"), b.Get("content")
	if !ca.Is(jsonv.Array) {
		if ca != nil && (cb == nil || !bytes.Equal(ca.Raw(as), cb.Raw(bs))) {
			return fmt.Errorf("content changed")
		}
		return nil
	}
	if !cb.Is(jsonv.Array) || len(ca.Elems) != len(cb.Elems) {
		return fmt.Errorf("content blocks changed")
	}
	user := a.Get("role").StringIs(as, "user")
	for j, x := range ca.Elems {
		y := cb.Elems[j]
		if !(user && x.Get("type").StringIs(as, anthToolResult)) {
			if !bytes.Equal(x.Raw(as), y.Raw(bs)) {
				return fmt.Errorf("block %d changed", j)
			}
			continue
		}
		if len(x.Members) != len(y.Members) {
			return fmt.Errorf("tool_result %d changed shape", j)
		}
		for k, m := range x.Members {
			n := y.Members[k]
			if m.Key != n.Key {
				return fmt.Errorf("tool_result %d changed keys", j)
			}
			if m.Key != "content" && !bytes.Equal(m.Value.Raw(as), n.Value.Raw(bs)) {
				return fmt.Errorf("tool_result %d: %s changed", j, m.Key)
			}
		}
	}
	return nil
}

// anthPairing returns the number of paired tool_use blocks, or an error when
// a tool_use is not answered in the immediately following user message, a
// tool_result follows another kind of block there, or a tool_result answers
// no tool_use of the message just before.
func anthPairing(src []byte, msgs *jsonv.Node) (int, error) {
	// Two maps for the whole walk, cleared per message: a 1 MB request has
	// hundreds of messages and the check runs this four times.
	pending, answered := map[string]bool{}, map[string]bool{}
	paired := 0
	for i, m := range msgs.Elems {
		content := m.Get("content")
		var blocks []*jsonv.Node
		if content.Is(jsonv.Array) {
			blocks = content.Elems
		}
		clear(answered)
		if m.Get("role").StringIs(src, "user") {
			results := true // still in the leading run of tool_result blocks
			for _, b := range blocks {
				if !b.Get("type").StringIs(src, anthToolResult) {
					results = false
					continue
				}
				id, _ := b.Get("tool_use_id").Text(src)
				if !results {
					return 0, fmt.Errorf("anthropic: tool_result after other content in message %d", i)
				}
				if !pending[id] || answered[id] {
					return 0, fmt.Errorf("anthropic: tool_result without its tool_use in message %d", i)
				}
				answered[id] = true
				paired++
			}
		}
		if len(answered) != len(pending) {
			return 0, fmt.Errorf("anthropic: tool_use without tool_result before message %d", i)
		}
		clear(pending)
		if m.Get("role").StringIs(src, "assistant") {
			for _, b := range blocks {
				if b.Get("type").StringIs(src, anthToolUse) {
					id, _ := b.Get("id").Text(src)
					pending[id] = true
				}
			}
		}
	}
	return paired, nil
}

// cacheBreakpoints appends every cache_control marker: the path of the
// object that holds it, in document order, and its TTL. path is the stack
// of keys (idx < 0) and indexes leading to n; it is rendered only for a
// hit. A nil path starts on a stack of pathDepth steps: a 1 MB body's
// tree has thousands of objects, and growing a new path for each one
// (append to a full slice) was most of an Anthropic compile's garbage.
func cacheBreakpoints(src []byte, n *jsonv.Node, path []pathStep, out *[]breakpoint) {
	if path == nil {
		var stack [pathDepth]pathStep
		path = stack[:0]
	}
	walkBreakpoints(src, n, path, out)
}

// pathDepth is deeper than the paths of markers in real requests
// (tools/3, messages/7/content/2); a deeper path grows as append grows it.
const pathDepth = 16

// walkBreakpoints is cacheBreakpoints' walk. A child's path is path with
// one more step appended in place: siblings reuse the same slot, which is
// safe because a path is read (rendered) only while its walk runs.
func walkBreakpoints(src []byte, n *jsonv.Node, path []pathStep, out *[]breakpoint) {
	switch n.Kind {
	case jsonv.Object:
		for _, m := range n.Members {
			if m.Key == "cache_control" {
				var b strings.Builder
				for _, p := range path {
					b.WriteByte('/')
					if p.idx < 0 {
						b.WriteString(strconv.Quote(p.key))
					} else {
						b.WriteString(strconv.Itoa(p.idx))
					}
				}
				*out = append(*out, breakpoint{path: b.String(), oneHour: m.Value.Get("ttl").StringIs(src, "1h")})
			}
		}
		for _, m := range n.Members {
			if m.Value.Kind == jsonv.Object || m.Value.Kind == jsonv.Array {
				walkBreakpoints(src, m.Value, append(path, pathStep{key: m.Key, idx: -1}), out)
			}
		}
	case jsonv.Array:
		for i, e := range n.Elems {
			if e.Kind == jsonv.Object || e.Kind == jsonv.Array {
				walkBreakpoints(src, e, append(path, pathStep{idx: i}), out)
			}
		}
	}
}

type pathStep struct {
	key string
	idx int
}

// rules checks the provider's rules on one request: tool pairing (results
// in the immediately following user message, before any other block) and
// the cache_control breakpoints (breakpointRules).
func (anthropicFormat) rules(d *doc) error {
	if _, err := anthPairing(d.src, d.root.Get("messages")); err != nil {
		return err
	}
	var bps []breakpoint
	cacheBreakpoints(d.src, d.root, nil, &bps)
	return breakpointRules(bps)
}
