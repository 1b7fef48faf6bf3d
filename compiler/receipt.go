package compiler

import (
	"encoding/hex"
	"strconv"
	"strings"
	"unicode"
)

// ReceiptPrefix starts every receipt, so tools and tests can recognise one.
const ReceiptPrefix = "[Token Terminator artifact a_"

// ArtifactID is the public name of an artifact: "a_" and the first 32 hex
// digits of its SHA-256.
func ArtifactID(d Digest) string { return "a_" + hex.EncodeToString(d[:16]) }

// Receipt is the one-line stand-in for a vaulted artifact. It depends only on
// the artifact (digest, tool name, size), so the same artifact yields the
// same bytes in every request and provider prompt caches keep hitting. It
// never carries content or tool arguments.
func Receipt(d Digest, tool string, chars int) string {
	var b strings.Builder
	b.Grow(160)
	b.WriteString(ReceiptPrefix)
	b.WriteString(hex.EncodeToString(d[:16]))
	b.WriteString(" | tool=")
	b.WriteString(SanitizeTool(tool))
	b.WriteString(" | chars=")
	b.WriteString(strconv.Itoa(chars))
	b.WriteString(" | sha256=")
	b.WriteString(hex.EncodeToString(d[:8]))
	b.WriteString("…]")
	return b.String()
}

// SanitizeTool makes a tool name safe to show: whitespace becomes '_', only
// [A-Za-z0-9._:/-] is kept, at most 80 characters. Empty becomes "tool".
func SanitizeTool(name string) string {
	out := make([]byte, 0, len(name))
	for _, r := range name {
		if len(out) == 80 {
			break
		}
		switch {
		case unicode.IsSpace(r):
			out = append(out, '_')
		case r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == '.' || r == '_' || r == ':' || r == '/' || r == '-'):
			out = append(out, byte(r))
		}
	}
	if len(out) == 0 {
		return "tool"
	}
	return string(out)
}
