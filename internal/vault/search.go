package vault

import (
	"context"
	"strings"
)

// The rules of Resolve and Search that every backend follows, so each
// answers recovery exactly as the others do.

// SearchScanLimit bounds the artifact records one Search considers (the
// tenant's newest), so a search costs at most this many small metadata
// reads and content decodes whatever the vault holds.
const SearchScanLimit = 20000

// ArtifactIDHex returns the 32 lower-case hex digits of a well-formed
// public artifact id (artifact.ID), the digest's hex prefix.
func ArtifactIDHex(id string) (string, bool) {
	h, ok := strings.CutPrefix(id, "a_")
	if !ok || len(h) != 32 {
		return "", false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", false
		}
	}
	return h, true
}

// ContainsFold reports whether text contains lower (already lower-cased),
// ignoring case as strings.ToLower does, in time linear in text.
func ContainsFold(text []byte, lower string) bool {
	ok, _ := newScan(context.Background(), lower).contains(text)
	return ok
}
