// Package artifact is the vocabulary the compiler, the vault backends, the
// token counter and the recovery tool share: digests, scopes, artifacts and
// the lineage records that name them, the receipt syntax and ids, and token
// counts. It has no dependencies inside the module, so each of those
// packages can use it without importing another.
package artifact

import (
	"context"
	"errors"
)

// Digest is a SHA-256 digest. Artifacts are addressed by the digest of their
// text; lineage nodes by the chain hash of their messages.
type Digest [32]byte

// Scope identifies whose artifacts and lineage a request may see. Tenant is an
// opaque keyed hash of the request's credential (never the credential);
// Session is an optional extra conversation key (already hashed or opaque).
// Artifacts are scoped by Tenant; lineage by Tenant and Session.
type Scope struct {
	Tenant  string
	Session string
}

// Artifact is a piece of content removed from a request and replaced by a
// receipt. Text is exactly what the model saw; Raw is the exact bytes that
// were replaced (a JSON value, or the raw span of a tool result's body
// inside its string when the client's wrapper stayed around the receipt), so
// the request can be restored byte for byte. Text and Raw may share the
// request body's memory: a Store copies what it keeps.
type Artifact struct {
	Digest Digest // DigestOf(Text, Raw): each raw spelling is its own artifact
	Text   string
	Raw    []byte
	Tool   string // private provenance: never logged, never in a receipt
	Args   string // private provenance: never logged, never in a receipt
	Chars  int    // Unicode code points in Text
}

// Lineage is what the Store knows about a request's recorded ancestry.
type Lineage struct {
	// Found reports whether a recorded proper prefix exists.
	Found bool
	// Ancestor is the chain hash of the longest recorded proper prefix.
	Ancestor Digest
	// Length is the number of messages of that prefix.
	Length int
	// Exposures counts, per artifact, the forwarded requests along the
	// ancestry that carried the artifact inline (cumulative, including the
	// ancestor itself). An artifact a forwarded request of the ancestry
	// named in a receipt or folded turn but that none carried inline is
	// present with count 0: the keys are what the conversation may
	// recover (the compiler's Result.Reachable).
	Exposures map[Digest]int
	// Cache is the ancestor's Record.Cache, returned as stored (nil when
	// none was recorded).
	Cache []byte
}

// Record is written after a request is forwarded: the forwarded request's
// chain end with the cumulative inline exposures along its ancestry.
type Record struct {
	ChainEnd  Digest
	Length    int
	Parent    Digest
	HasParent bool
	// Exposures is cumulative: the ancestor's counts plus one for every
	// artifact this request carried inline, and 0 for every artifact it
	// named that has no count yet (Lineage.Exposures).
	Exposures map[Digest]int
	// Referenced lists artifacts this request named in receipts, so the Store
	// can keep them alive (retention) while the conversation is active.
	Referenced []Digest
	// Cache is the compiler's opaque record of the provider prompt cache
	// after this request (what was forwarded, rendered, and when); a Store
	// keeps it with the node and returns it as Lineage.Cache. May be nil.
	Cache []byte
}

// Store is the compiler's view of the vault. Implementations must be safe for
// concurrent use and must keep tenants strictly apart.
type Store interface {
	// Ancestor returns the longest recorded proper prefix of chain, where
	// chain[i] is the chain hash of the first i+1 messages. The full chain
	// itself (chain[len-1]) is never an ancestor, so a retried request sees
	// the same ancestry as its first attempt.
	Ancestor(ctx context.Context, scope Scope, chain []Digest) (Lineage, error)
	// Missing confirms which of a tenant's artifacts are stored and returns
	// those that are not. A confirmed artifact must stay retrievable for the
	// retention window (the confirmation counts as a use), so its receipt may
	// go out without sending its content to the store again.
	Missing(ctx context.Context, scope Scope, digests []Digest) ([]Digest, error)
	// Persist makes artifacts durable before any receipt naming them is
	// forwarded: written (one batch), synced, read back and compared. An
	// artifact already stored is only verified present. Any failure,
	// including a full vault, is an error.
	Persist(ctx context.Context, scope Scope, arts []Artifact) error
	// Record stores the lineage node of a forwarded request.
	Record(ctx context.Context, scope Scope, rec Record) error
}

// ErrFull may be wrapped by a Store whose capacity is exhausted; the compiler
// reports it as vault_full rather than vault_error.
var ErrFull = errors.New("vault full")
