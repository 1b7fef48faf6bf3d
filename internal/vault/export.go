package vault

import "github.com/tokenterminator/caddy-token-terminator/internal/compiler"

// The record codec, shared with the other backends (vault/redisvault) so that
// every backend stores the same bytes: artifact content as one s2 block with a
// CRC-32C, lineage nodes in the versioned varint layout. Thin wrappers only;
// the codec itself lives in codec.go.

// EncodeContent returns a's stored form (Text, Raw, Tool, Args).
func EncodeContent(a *compiler.Artifact) []byte { return encodeContent(a) }

// EncodeAll checks that each artifact is named by its digest (NamesNew) and
// returns the stored forms, in order, using every core for large batches;
// a wrong digest fails the batch with ErrDigest.
func EncodeAll(arts []*compiler.Artifact) ([][]byte, error) { return encodeAll(nil, arts) }

// DecodeContent fills a's Text, Raw, Tool and Args from stored content. A
// record that fails its checksum is an error.
func DecodeContent(b []byte, a *compiler.Artifact) error { return decodeContent(b, a) }

// SameContent reports whether stored content b holds exactly a's fields.
func SameContent(b []byte, a *compiler.Artifact) bool { return sameContent(b, a) }

// EncodeNode returns the stored form of rec's lineage node (exposures and
// cache state), recorded at unixNano.
func EncodeNode(rec compiler.Record, unixNano int64) []byte {
	n := node{Length: rec.Length, Parent: rec.Parent, HasParent: rec.HasParent, Time: unixNano, Exposures: rec.Exposures, Cache: rec.Cache}
	return n.encode()
}

// DecodeNode returns what Ancestor reports of a stored lineage node: its
// cumulative exposures and the compiler's cache state (nil when none).
func DecodeNode(b []byte) (exposures map[compiler.Digest]int, cache []byte, err error) {
	var n node
	if err := n.decode(b); err != nil {
		return nil, nil, err
	}
	return n.Exposures, n.Cache, nil
}
