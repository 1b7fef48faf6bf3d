package compiler

import "github.com/tokenterminator/caddy-token-terminator/internal/artifact"

// Keyed identities (Request.KeyID). A gateway that encrypts its vault names
// artifacts by a keyed hash of their content identity, so receipts, the
// working state, the recovery tool and the vault's keys confirm nothing
// about content without the tenant's key, while one tenant's ids stay
// deterministic. The content identity is still what the parse computes and
// caches (it is the same for every tenant); a doc's artifact identities are
// keyed once, right after the parse, and a folded turn's when it is made.

// keyIDs replaces the artifact identity of every slot of d by its keyed
// form under f (nil: left as they are). A text shared by two slots is
// keyed once.
func keyIDs(d *doc, f func(artifact.Digest) artifact.Digest) {
	d.keyID = f
	if f == nil {
		return
	}
	seen := make(map[*text]bool, len(d.slots))
	for _, s := range d.slots {
		if s.text == nil || seen[s.text] {
			continue
		}
		seen[s.text] = true
		s.text.digest = f(s.text.digest)
	}
}

// keyedID returns d's identity as d's doc names artifacts.
func (d *doc) keyedID(id artifact.Digest) artifact.Digest {
	if d.keyID == nil {
		return id
	}
	return d.keyID(id)
}
