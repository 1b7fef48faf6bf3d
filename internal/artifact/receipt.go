package artifact

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"unicode"
	"unsafe"
)

// ReceiptPrefix starts every receipt, so tools and tests can recognise one.
const ReceiptPrefix = "[Token Terminator artifact a_"

// FoldPrefix starts every folded-turn summary.
const FoldPrefix = "[Token Terminator folded turn "

// artifactDomain separates artifact identities from every other SHA-256
// the gateway computes (chain hashes, tenant keys).
const artifactDomain = "token-terminator/artifact/v2\x00"

// DigestOf is an artifact's identity: a SHA-256 over the digest of
// Text (what the model saw) and the digest of Raw (the exact bytes the
// receipt replaced). The decoded text alone is lossy: parts [X, Y], [X+Y]
// and the string "X+Y" decode alike, lone surrogates \ud800 and \udbff
// both decode to U+FFFD, and two escape spellings of one text decode alike,
// yet each must restore to its own bytes. Raw tells them all apart (a
// whole value and a body span inside a string cannot be equal: a whole
// slot value always holds an unescaped '"', string content never does), so
// every distinct spelling is its own artifact and Get's Raw is always that
// request's bytes. Text is covered as well, so a backend verifies the
// whole record (Text it serves, Raw it restores) against the name a
// receipt carries, without knowing how Text was decoded.
func DigestOf(text string, raw []byte) Digest {
	return DigestOfSums(sha256.Sum256(unsafe.Slice(unsafe.StringData(text), len(text))), sha256.Sum256(raw))
}

// DigestOfSums is DigestOf from the SHA-256 digests of an artifact's text
// and raw bytes, for a caller that has them already.
func DigestOfSums(text, raw Digest) Digest {
	var b [len(artifactDomain) + 64]byte
	n := copy(b[:], artifactDomain)
	n += copy(b[n:], text[:])
	copy(b[n:], raw[:])
	return sha256.Sum256(b[:])
}

// ID is the public name of an artifact: "a_" and the first 32 hex
// digits of its digest (DigestOf).
func ID(d Digest) string { return "a_" + hex.EncodeToString(d[:16]) }

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
