package vault

import (
	"crypto/sha256"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// Artifact identity, shared by every backend. An artifact is filed under
// artifact.DigestOf(Text, Raw): distinct raw spellings of one text are
// distinct artifacts, so each restores byte for byte. Records written
// before that identity were filed under sha256(Text); they are still
// readable (their receipts are out there), but nothing new is filed so.

// NamesNew reports whether d is the identity of an artifact being written:
// only the current identity is accepted, since a text-only name would let
// a second spelling pass as the first.
func NamesNew(d artifact.Digest, text string, raw []byte) bool {
	return artifact.DigestOf(text, raw) == d
}

// NamesStored reports whether a stored record (text and raw as read back)
// is the artifact d: the current identity, or the text digest of a record
// written before it.
func NamesStored(d artifact.Digest, text, raw []byte) bool {
	t := sha256.Sum256(text)
	return t == d || artifact.DigestOf(string(text), raw) == d
}
