package compiler

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
	"github.com/tokenterminator/caddy-token-terminator/internal/splice"
)

// verify is the validity check on the final payload: the rewrite must parse,
// keep the original's structure everywhere except the replaced values (each
// now a string), and pass the format's own provider rules. It is also the
// oracle of the tests and fuzzers. cache is the compiler's text cache (nil
// in the oracle): every long string of the rewrite is a string of the
// original, just hashed, so re-reading it costs one keyed hash.
func verify(f format, p *plan, out []byte, cache *textCache) error {
	_, err := verified(f, p, out, cache)
	return err
}

// verified is verify returning the rewrite's parsed tree, which the
// recovery tool's insertion is placed by (addTool), so the rewrite is
// parsed once.
func verified(f format, p *plan, out []byte, cache *textCache) (*jsonv.Node, error) {
	var known jsonv.Known
	if p.d.known != nil {
		known = &unchangedStrings{orig: p.d.src, strs: p.d.known.keys, edits: p.edits}
	}
	root, err := jsonv.ParseIn(p.d.arena, out, maxDepthForRequests, known)
	if err != nil {
		return nil, fmt.Errorf("rewrite does not parse: %w", err)
	}
	return root, verifyTree(f, p, out, root, cache)
}

// unchangedStrings is the Known of a rewrite's parse. A long string of the
// rewrite outside every edit is, when the splice is right, the original's
// string at the same place moved by the edits before it, and it is taken as
// validated only when its bytes equal that string's, which the original's
// parse validated. So the check skips the scan of what the rewrite carries
// over unchanged (the newest tool result, the system prompt) and still
// scans every byte a wrong splice could have changed: an answer rests on
// the byte comparison, never on the offsets being right.
type unchangedStrings struct {
	orig  []byte
	strs  []spanKey // the original's long strings, ascending by start
	edits []edit    // sorted and disjoint, as splice.Reserve leaves them
	next  int       // the first edit that does not end before the cursor
	delta int       // what edits[:next] add to the rewrite's length
}

// String is asked in ascending order of start (the parse reads its source
// once, front to back), so the edits are walked once.
func (u *unchangedStrings) String(src []byte, start int) (end int, escaped, ascii, ok bool) {
	for ; u.next < len(u.edits); u.next++ {
		e := u.edits[u.next]
		if e.start+u.delta+len(e.repl) > start {
			break
		}
		u.delta += len(e.repl) - (e.end - e.start)
	}
	at := start - u.delta // where the string starts in the original
	limit := len(u.orig)  // where the next edit starts in the original
	if u.next < len(u.edits) {
		e := u.edits[u.next]
		if start >= e.start+u.delta {
			return 0, false, false, false // inside the edit's replacement
		}
		limit = e.start
	}
	i, found := spanIndex(u.strs, at)
	if !found {
		return 0, false, false, false
	}
	k := u.strs[i]
	n := k.key.n
	if at+n > limit || start+n > len(src) || !bytes.Equal(src[start:start+n], u.orig[at:at+n]) {
		return 0, false, false, false
	}
	return start + n, k.escaped, k.ascii, true
}

func (u *unchangedStrings) Scanned([]byte, int, int, bool, bool) {}

func verifyTree(f format, p *plan, out []byte, root *jsonv.Node, cache *textCache) error {
	orig := p.d
	replaced := make(map[int]bool, len(p.edits))
	for _, e := range p.edits {
		replaced[e.at] = true
	}
	var list *jsonv.Node
	var keep []int
	if p.compaction != nil && len(p.compaction.folds) > 0 {
		list, keep = p.compaction.list, p.compaction.keep
	}
	if err := sameFolded(orig, out, root, replaced, list, keep, receiptBlocksAllowed(f)); err != nil {
		return err
	}
	nd := &doc{src: out, root: root, bare: true}
	if reason := f.parse(nd, newHasher(out, cache)); reason != "" {
		return fmt.Errorf("rewrite is %s", reason)
	}
	if rf, ok := f.(ruleFormat); ok && rf.rules(orig) == nil {
		if err := rf.rules(nd); err != nil {
			return err
		}
	}
	if list == nil {
		return f.check(orig, nd)
	}
	// Folded: the format's own check compares the output with the original
	// as it is with only the folds applied, so everything but receipts must
	// match it exactly (blocks, signatures, breakpoints, pairing).
	var folds []edit
	for _, fo := range p.compaction.folds {
		folds = append(folds, fo.edits...)
	}
	if len(folds) == 0 {
		return nil // the test oracle knows no fold edits; structure and rules were checked
	}
	projected, err := splice.Apply(orig.src, folds)
	if err != nil {
		return err
	}
	// The format's check reads structure only, so the projection is parsed
	// bare: its results are not hashed again.
	proot, err := jsonv.ParseIn(orig.arena, projected, maxDepthForRequests, nil)
	if err != nil {
		return fmt.Errorf("folded original does not parse: %w", err)
	}
	pd := &doc{src: projected, root: proot, bare: true}
	if reason := f.parse(pd, newHasher(projected, cache)); reason != "" {
		return fmt.Errorf("folded original is %s", reason)
	}
	return f.check(pd, nd)
}

// ruleFormat is implemented by formats that can check their provider's
// rules on a single request, without an original to compare with.
type ruleFormat interface {
	rules(d *doc) error
}

// sameFolded is sameExcept for a root object whose history list had turns
// folded: keep maps each output element to its original, -1 for a summary,
// preambleOf(i) for element i's session-context parts alone.
func sameFolded(orig *doc, bs []byte, b *jsonv.Node, replaced map[int]bool, list *jsonv.Node, keep []int, blocks bool) error {
	as, a := orig.src, orig.root
	if list == nil {
		return sameExcept(as, a, bs, b, replaced, blocks)
	}
	if a.Kind != jsonv.Object || b.Kind != jsonv.Object || len(a.Members) != len(b.Members) {
		return fmt.Errorf("root changed shape")
	}
	for i := range a.Members {
		am, bm := a.Members[i], b.Members[i]
		if am.Key != bm.Key {
			return fmt.Errorf("key changed at %d", a.Start)
		}
		if am.Value != list {
			if err := sameExcept(as, am.Value, bs, bm.Value, replaced, blocks); err != nil {
				return err
			}
			continue
		}
		if !bm.Value.Is(jsonv.Array) || len(bm.Value.Elems) != len(keep) {
			return fmt.Errorf("history has %d elements, want %d", len(bm.Value.Elems), len(keep))
		}
		for j, k := range keep {
			e := bm.Value.Elems[j]
			if k == -1 {
				if !strings.HasPrefix(foldedText(bs, e), artifact.FoldPrefix) {
					return fmt.Errorf("element %d is not a summary", j)
				}
				continue
			}
			if k < -1 {
				if err := samePreamble(orig, list.Elems[preambleIndex(k)], orig.infos[preambleIndex(k)], bs, e); err != nil {
					return fmt.Errorf("element %d: %w", j, err)
				}
				continue
			}
			if err := sameExcept(as, list.Elems[k], bs, e, replaced, blocks); err != nil {
				return err
			}
		}
	}
	return nil
}

// samePreamble checks that e is element m with only its session-context
// parts: every member but content byte-identical, content exactly those
// parts.
func samePreamble(orig *doc, m *jsonv.Node, in msgInfo, bs []byte, e *jsonv.Node) error {
	if in.preamble == nil || !e.Is(jsonv.Object) || len(e.Members) != len(m.Members) {
		return fmt.Errorf("not a kept preamble")
	}
	for i, mm := range m.Members {
		em := e.Members[i]
		if em.Key != mm.Key {
			return fmt.Errorf("kept preamble changed keys")
		}
		if mm.Value == in.content {
			if !em.Value.Is(jsonv.Array) || len(em.Value.Elems) != len(in.preamble) {
				return fmt.Errorf("kept preamble has other parts")
			}
			for k, p := range in.preamble {
				if !bytes.Equal(p.Raw(orig.src), em.Value.Elems[k].Raw(bs)) {
					return fmt.Errorf("kept preamble part %d changed", k)
				}
			}
			continue
		}
		if !bytes.Equal(mm.Value.Raw(orig.src), em.Value.Raw(bs)) {
			return fmt.Errorf("kept preamble: %s changed", mm.Key)
		}
	}
	return nil
}

func foldedText(src []byte, e *jsonv.Node) string {
	if !e.Get("role").StringIs(src, "user") || len(e.Members) != 2 {
		return ""
	}
	if parts := e.Get("parts"); parts != nil { // Gemini: one text part
		if !parts.Is(jsonv.Array) || len(parts.Elems) != 1 || len(parts.Elems[0].Members) != 1 {
			return ""
		}
		s, _ := parts.Elems[0].Get("text").Text(src)
		return s
	}
	s, _ := e.Get("content").Text(src)
	return s
}

// sameExcept compares two trees: identical kinds, keys in the same order,
// identical scalar bytes; an original value whose start offset is in
// replaced must be unchanged or have become a string, or with blocks (see
// receiptBlocksAllowed) a receipt block list (isReceiptBlock).
func sameExcept(as []byte, a *jsonv.Node, bs []byte, b *jsonv.Node, replaced map[int]bool, blocks bool) error {
	if replaced[a.Start] && !bytes.Equal(a.Raw(as), b.Raw(bs)) {
		if b.Kind != jsonv.String && !(blocks && isReceiptBlock(bs, b)) {
			return fmt.Errorf("replaced value at %d is %s", a.Start, b.Kind)
		}
		return nil
	}
	if a.Kind != b.Kind {
		return fmt.Errorf("kind changed at %d", a.Start)
	}
	switch a.Kind {
	case jsonv.Object:
		if len(a.Members) != len(b.Members) {
			return fmt.Errorf("object at %d changed size", a.Start)
		}
		for i := range a.Members {
			if a.Members[i].Key != b.Members[i].Key {
				return fmt.Errorf("key changed at %d", a.Start)
			}
			if err := sameExcept(as, a.Members[i].Value, bs, b.Members[i].Value, replaced, blocks); err != nil {
				return err
			}
		}
	case jsonv.Array:
		if len(a.Elems) != len(b.Elems) {
			return fmt.Errorf("array at %d changed size", a.Start)
		}
		for i := range a.Elems {
			if err := sameExcept(as, a.Elems[i], bs, b.Elems[i], replaced, blocks); err != nil {
				return err
			}
		}
	default:
		if !bytes.Equal(a.Raw(as), b.Raw(bs)) {
			return fmt.Errorf("value changed at %d", a.Start)
		}
	}
	return nil
}
