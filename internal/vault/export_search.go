package vault

import "strings"

// The rules of Resolve and Search (search.go), exported so that every
// backend (vault/redisvault) answers recovery exactly as Badger does.

// SearchScanLimit bounds the artifact records one Search considers: the
// tenant's newest.
const SearchScanLimit = maxSearchScan

// ArtifactIDHex returns the 32 lower-case hex digits of a well-formed
// public artifact id (artifact.ID), the digest's hex prefix.
func ArtifactIDHex(id string) (string, bool) {
	h, ok := idHex(id)
	return string(h), ok
}

// SearchMatches reports whether an artifact of text and tool matches
// query as Search does: tool or text contains it, ignoring case; an empty
// query matches everything. lowerQuery is strings.ToLower(query).
func SearchMatches(text []byte, tool, lowerQuery string) bool {
	return lowerQuery == "" || strings.Contains(strings.ToLower(tool), lowerQuery) || containsFold(text, lowerQuery)
}
