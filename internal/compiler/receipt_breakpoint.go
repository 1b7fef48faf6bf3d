package compiler

import (
	"fmt"
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
)

// Receipt breakpoints (Anthropic). A provider that caches only at
// cache_control breakpoints keeps an entry where an earlier prompt had
// one. Claude Code moves its history marker to the newest message on every
// request, so the only entry that carries the earlier receipts ends after
// the newest tool result, still inline. Receipting that result on a later
// request changes the prompt before the entry, and the whole history is
// written again: a lease read back only the tools and system.
//
// So when the client uses 5-minute breakpoints and leaves one of the four
// free, the gateway's newest receipt before the client's last breakpoint
// carries a breakpoint of its own. Inside the value it replaced (the
// tool_result's content, now a list of one text block), so every byte
// outside the replaced values stays the client's (invariant 2). The next
// request receipts the next result after it, and the provider reads the
// prompt up to that receipt from the entry it wrote. A breakpoint before
// the client's last one writes no token the client's own would not, so it
// is free. Every receipt of such a request goes out as a one-block list,
// marked or not: the marker moves to the newest receipt, and the older one
// must render the same without it (the marker keys nothing) for the entry
// to be read.
type receiptBlocks struct {
	on bool // receipts go out as one-text-block lists
	// The added breakpoint goes on the last receipt in a unit before limit
	// (the client's last marked unit) whose unit the client did not mark,
	// and only when free (the request has fewer breakpoints than allowed).
	free   bool
	limit  int
	marked []bool // per head and unit: a client breakpoint (choice.marked)
}

// receiptBlocksFor decides a request's receipt form: on for Anthropic
// requests whose client marks one breakpoint in the history, after its
// first message, and none 1-hour (a 5-minute
// breakpoint must not precede a 1-hour one, and the gateway adds only
// 5-minute ones); marked is choice.marked, count the request's markers
// (breakpointMarks).
func receiptBlocksFor(d *doc, marked []bool, oneHour bool, count int) receiptBlocks {
	if marked == nil || oneHour {
		return receiptBlocks{}
	}
	rb := receiptBlocks{marked: marked, limit: -1}
	history := 0 // breakpoints in the history
	for u := len(marked) - 1; u >= 1; u-- {
		if !marked[u] {
			continue
		}
		if rb.limit < 0 {
			rb.limit = u - 1
		}
		if u-1 >= d.offset {
			history++
		}
	}
	// Only a single history breakpoint (Claude Code's, on the newest
	// block) leaves the receipts without an entry of their own. With two
	// or more (SWE-agent marks the last two user messages) the client's
	// second one already ends right before the newest round, where new
	// receipts go, and plain strings are shorter.
	rb.on = history == 1 && rb.limit > 0
	rb.free = rb.on && count < anthropicMaxBreakpoints
	return rb
}

// markable reports whether the receipt of slot s may carry the added
// breakpoint.
func (rb receiptBlocks) markable(s slot) bool {
	return rb.free && s.unit < rb.limit && !rb.marked[s.unit+1]
}

const (
	receiptBlockOpen  = `[{"type":"text","text":`
	receiptBlockClose = `}]`
	receiptMarker     = `,"cache_control":{"type":"ephemeral"}`
)

// blockReceipt is a quoted JSON string holding a receipt (with the
// client's wrapper parts around it, if any) as a one-text-block list, with
// the receipt breakpoint when marked.
func blockReceipt(quoted []byte, marked bool) []byte {
	out := make([]byte, 0, len(receiptBlockOpen)+len(quoted)+len(receiptMarker)+len(receiptBlockClose))
	out = append(out, receiptBlockOpen...)
	out = append(out, quoted...)
	if marked {
		out = append(out, receiptMarker...)
	}
	return append(out, receiptBlockClose...)
}

// receiptBlockFingerprint tells a receipt sent as a block list from one
// sent as a string in the rendered fingerprints (cost_state.go): their
// bytes differ, so a prompt cached with one is not a prefix of the other.
const receiptBlockFingerprint = 0xb10c

// isReceiptBlock reports whether b is a receipt as blockReceipt writes it:
// a list of one object with type "text", a string text and, optionally, a
// cache_control of exactly {"type":"ephemeral"}.
func isReceiptBlock(bs []byte, b *jsonv.Node) bool {
	if !b.Is(jsonv.Array) || len(b.Elems) != 1 {
		return false
	}
	e := b.Elems[0]
	if !e.Is(jsonv.Object) || (len(e.Members) != 2 && len(e.Members) != 3) {
		return false
	}
	if e.Members[0].Key != "type" || !e.Members[0].Value.StringIs(bs, "text") ||
		e.Members[1].Key != "text" || !e.Members[1].Value.Is(jsonv.String) {
		return false
	}
	if len(e.Members) == 3 {
		m := e.Members[2]
		if m.Key != "cache_control" || !m.Value.Is(jsonv.Object) || len(m.Value.Members) != 1 ||
			m.Value.Members[0].Key != "type" || !m.Value.Members[0].Value.StringIs(bs, "ephemeral") {
			return false
		}
	}
	return true
}

// breakpoint is a cache_control marker: the path of the object holding it
// and whether it asks for the 1-hour TTL.
type breakpoint struct {
	path    string
	oneHour bool
}

// checkAddedBreakpoint compares the breakpoints of an Anthropic rewrite
// (out) with the original's (orig): the same at the same places, or with
// one more inside a tool_result's content (a receipt breakpoint: its shape
// is checked with the replaced value, isReceiptBlock), within the limit of
// max, and only when the original asks for no 1-hour TTL.
func checkAddedBreakpoint(orig, out []breakpoint, max int) error {
	if len(out) == len(orig) {
		for i := range orig {
			if orig[i] != out[i] {
				return fmt.Errorf("anthropic: cache_control breakpoints changed")
			}
		}
		return nil
	}
	if len(out) != len(orig)+1 {
		return fmt.Errorf("anthropic: cache_control breakpoints changed (%d -> %d)", len(orig), len(out))
	}
	if len(out) > max {
		return fmt.Errorf("anthropic: %d cache_control breakpoints, more than %d", len(out), max)
	}
	added := -1
	for i, j := 0, 0; i < len(out); i++ {
		if j < len(orig) && out[i] == orig[j] {
			j++
			continue
		}
		if added >= 0 {
			return fmt.Errorf("anthropic: cache_control breakpoints changed")
		}
		added = i
	}
	for _, b := range orig {
		if b.oneHour {
			return fmt.Errorf("anthropic: a breakpoint added to a request with 1-hour ones")
		}
	}
	// /"messages"/i/"content"/j/"content"/0: the text block of a
	// tool_result's content.
	p := strings.Split(out[added].path, "/")
	if len(p) != 7 || p[1] != `"messages"` || p[3] != `"content"` || p[5] != `"content"` || p[6] != "0" || out[added].oneHour {
		return fmt.Errorf("anthropic: a breakpoint added outside a receipt")
	}
	return nil
}

// receiptBlocksAllowed reports whether a format's replaced values may
// become receipt block lists: Anthropic tool_result content.
func receiptBlocksAllowed(f format) bool {
	_, ok := f.(anthropicFormat)
	return ok
}

// breakpointRules checks a request's breakpoints (in document order) by
// Anthropic's rules: at most four, and every 1-hour one before every
// 5-minute one in render order (tools, system, messages; a 400 otherwise).
func breakpointRules(bps []breakpoint) error {
	if len(bps) > anthropicMaxBreakpoints {
		return fmt.Errorf("anthropic: %d cache_control breakpoints, more than %d", len(bps), anthropicMaxBreakpoints)
	}
	rank := func(b breakpoint) int {
		for i, top := range []string{`/"tools"`, `/"system"`, `/"messages"`} {
			if strings.HasPrefix(b.path, top+"/") || b.path == top {
				return i
			}
		}
		return 3
	}
	seen5 := false
	for r := 0; r <= 3; r++ {
		for _, b := range bps {
			if rank(b) != r {
				continue
			}
			if b.oneHour && seen5 {
				return fmt.Errorf("anthropic: a 1-hour cache_control breakpoint after a 5-minute one")
			}
			if !b.oneHour {
				seen5 = true
			}
		}
	}
	return nil
}
