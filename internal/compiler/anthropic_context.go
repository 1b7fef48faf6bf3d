package compiler

import (
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
)

// Anthropic context editing (context_management) is judged edit by edit.
// The gateway rewrites before the provider applies the edits, so an edit
// composes with the rewrite when it cannot undo or misread anything the
// gateway did:
//
//   - clear_thinking_*: clears thinking blocks of earlier turns. The
//     compiler never touches thinking blocks (their signatures go out byte
//     for byte), so what the provider clears is exactly what the client sent.
//   - clear_tool_uses_*: clears old tool results after the gateway. A
//     receipt keeps its tool_result block, its tool_use_id and the pairing,
//     so the provider finds every tool use it would clear; clearing a
//     receipt only clears less.
//
// Any other edit type (server-side compaction, a type this gateway does not
// know yet) and any malformed value pass the request through untouched:
// the provider's effect on a rewritten context is not known.
var compatibleEdits = []string{"clear_thinking_", "clear_tool_uses_"}

// contextManagementCompatible reports whether every edit of a
// context_management value is one the rewrite composes with.
func contextManagementCompatible(src []byte, cm *jsonv.Node) bool {
	if !cm.Is(jsonv.Object) {
		return false
	}
	edits := cm.Get("edits")
	if !edits.Is(jsonv.Array) {
		return false
	}
	for _, e := range edits.Elems {
		typ, ok := e.Get("type").Text(src)
		if !e.Is(jsonv.Object) || !ok || !compatibleEdit(typ) {
			return false
		}
	}
	return true
}

func compatibleEdit(typ string) bool {
	for _, p := range compatibleEdits {
		if strings.HasPrefix(typ, p) && len(typ) > len(p) {
			return true
		}
	}
	return false
}
