package compiler

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
)

// CheckCompacted is the validity check as a test oracle for any rewrite,
// compacted or not: out must be orig itself, or orig whose history has some
// runs of elements replaced by folded-turn summaries and some tool-result
// slots replaced by receipts, and must pass the checks the compiler runs
// before forwarding (structure, the format's provider rules). It recovers
// which values were replaced, and the alignment of the history, from the
// two bodies alone.
func CheckCompacted(path string, orig, out []byte) error { return check(path, orig, out, true, nil) }

// CheckRewrite is CheckCompacted for a rewrite that may only replace slot
// values with receipts: a folded turn is an error.
func CheckRewrite(path string, orig, out []byte) error { return check(path, orig, out, false, nil) }

// check is the oracle; ids, when set, accepts keyed receipt ids
// (oracle_keyed.go), else every id must be its content identity.
func check(path string, orig, out []byte, folding bool, ids *oracleIDs) error {
	out = WithoutRecovery(orig, out) // the tool edit is checked by the compiler itself
	if bytes.Equal(orig, out) {
		return nil
	}
	f := formatFor("POST", path)
	if f == nil {
		return fmt.Errorf("not a candidate path, yet the body changed")
	}
	// The working-state block has its own narrow rule (working_state.go);
	// the compiler adds none to an original that already ends with one.
	if bytes.Equal(WithoutWorkingState(path, orig), orig) {
		if out = WithoutWorkingState(path, out); bytes.Equal(orig, out) {
			return nil
		}
	}
	d, reason := parseDoc(f, orig, nil)
	if reason != "" {
		return fmt.Errorf("original is %s, yet the body changed", reason)
	}
	root, err := jsonv.Parse(out, maxDepthForRequests)
	if err != nil {
		return fmt.Errorf("rewrite does not parse: %w", err)
	}
	list, _ := d.history()
	outList := outHistory(d.doc, list, root)
	if list == nil || !outList.Is(jsonv.Array) {
		// No history list (a Responses string input): nothing may change
		// but slots, and there are none.
		return fmt.Errorf("body changed without a history to rewrite")
	}
	keep, folds, err := alignHistory(f, d.doc, list, outList, orig, out, folding)
	if err != nil {
		return err
	}
	edits, err := oracleReceiptEdits(d.doc, list, outList, keep, orig, out, ids)
	if err != nil {
		return err
	}
	if len(edits) == 0 && folds == 0 {
		return fmt.Errorf("body changed without any receipt or summary")
	}
	p := &plan{d: d.doc, edits: edits}
	if folds > 0 {
		p.compaction = &compaction{list: list, keep: keep, folds: make([]fold, folds)}
	}
	return verify(f, p, out, nil)
}

// outHistory is the rewrite's history list: the value of the member at
// list's place in the original's root, under the same key.
func outHistory(d *doc, list, root *jsonv.Node) *jsonv.Node {
	var outList *jsonv.Node
	for i, m := range d.root.Members {
		if m.Value == list && i < len(root.Members) && root.Members[i].Key == m.Key {
			outList = root.Members[i].Value
		}
	}
	return outList
}

// alignHistory aligns the rewrite's history with the original's, greedily:
// every kept element equals (up to receipts in its slots) a later original
// element, or is a later original element's session-context parts alone;
// summaries stand for what is skipped. keep[j] is the original element of
// output element j (-1 for a summary, preambleOf for a session-context
// part); folds counts the summaries.
func alignHistory(f format, d *doc, list, outList *jsonv.Node, orig, out []byte, folding bool) (keep []int, folds int, err error) {
	slotAt := make(map[int]bool, len(d.slots))
	for _, s := range d.slots {
		slotAt[s.value.Start] = true
	}
	oi := 0
	for _, e := range outList.Elems {
		if strings.HasPrefix(foldedText(out, e), artifact.FoldPrefix) {
			if !folding {
				return nil, 0, fmt.Errorf("history element at %d is a folded turn", e.Start)
			}
			keep = append(keep, -1)
			folds++
			continue
		}
		k := -1
		for ; oi < len(list.Elems); oi++ {
			if sameExcept(orig, list.Elems[oi], out, e, slotAt, receiptBlocksAllowed(f)) == nil {
				k = oi
				break
			}
			if folding && oraclePreambleExtract(orig, list.Elems[oi], out, e) {
				k = preambleOf(oi)
				break
			}
		}
		if oi == len(list.Elems) {
			return nil, 0, fmt.Errorf("history element at %d matches no original element", e.Start)
		}
		keep = append(keep, k)
		oi++
	}
	if folds == 0 && len(keep) != len(list.Elems) {
		return nil, 0, fmt.Errorf("history lost elements without a summary")
	}
	if err := oraclePreambleKept(orig, list, keep); err != nil {
		return nil, 0, err
	}
	return keep, folds, nil
}

// oracleReceiptEdits checks that every slot value that changed is now a
// receipt of exactly its stable body, with the client's wrapper parts
// around it unchanged, and returns an edit per such slot.
func oracleReceiptEdits(d *doc, list, outList *jsonv.Node, keep []int, orig, out []byte, ids *oracleIDs) ([]edit, error) {
	var edits []edit
	for _, s := range d.slots {
		for j, k := range keep {
			if k < 0 || s.unit-d.offset != k {
				continue
			}
			b := valueAt(list.Elems[k], s.value, outList.Elems[j])
			if b == nil || bytes.Equal(s.value.Raw(orig), b.Raw(out)) {
				continue
			}
			if err := oracleReceipt(s.value.Raw(orig), b.Raw(out), ids); err != nil {
				return nil, fmt.Errorf("slot at %d: %w", s.value.Start, err)
			}
			edits = append(edits, edit{start: s.value.Start, end: s.value.End, at: s.value.Start})
		}
	}
	return edits, nil
}

// receiptBlockRE matches a receipt block list as blockReceipt writes it,
// capturing the JSON string it holds.
var receiptBlockRE = regexp.MustCompile(`\[\{"type":"text","text":("(?:[^"\\]|\\.)*")(?:,"cache_control":\{"type":"ephemeral"\})?\}\]`)

// WithoutReceiptBlocks returns out with every Anthropic receipt block list
// (receipt_breakpoint.go) replaced by the JSON string it holds, so a check
// written for receipts sent as strings reads it as one. A client's own
// block list (no receipt in it) stays as it is.
func WithoutReceiptBlocks(out []byte) []byte {
	return receiptBlockRE.ReplaceAllFunc(out, func(b []byte) []byte {
		if q := receiptBlockRE.FindSubmatch(b)[1]; bytes.Contains(q, []byte(artifact.ReceiptPrefix)) {
			return q
		}
		return b
	})
}

// valueAt finds in b the node at the same path as target within a.
func valueAt(a, target, b *jsonv.Node) *jsonv.Node {
	if a == target {
		return b
	}
	if a.Kind != b.Kind {
		return nil
	}
	switch a.Kind {
	case jsonv.Object:
		for i := range a.Members {
			if i < len(b.Members) && a.Members[i].Value.Start <= target.Start && target.End <= a.Members[i].Value.End {
				return valueAt(a.Members[i].Value, target, b.Members[i].Value)
			}
		}
	case jsonv.Array:
		for i := range a.Elems {
			if i < len(b.Elems) && a.Elems[i].Start <= target.Start && target.End <= a.Elems[i].End {
				return valueAt(a.Elems[i], target, b.Elems[i])
			}
		}
	}
	return nil
}

// CheckRules checks a single body against its format's provider rules (tool
// call and result pairing, reasoning items followed by their item).
func CheckRules(path string, body []byte) error {
	f := formatFor("POST", path)
	if f == nil {
		return fmt.Errorf("not a candidate path")
	}
	d, reason := parseDoc(f, body, nil)
	if reason != "" {
		return fmt.Errorf("body is %s", reason)
	}
	return f.(ruleFormat).rules(d.doc)
}
