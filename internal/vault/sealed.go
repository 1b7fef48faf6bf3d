package vault

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"

	"github.com/tokenterminator/caddy-token-terminator/internal/seal"
)

// Encryption at rest (package seal). With the tenant's data keys in the
// request's context, a content record is stored as contentSealed followed
// by the sealed v2/v3 record, bound to its tenant and digest, so a value
// copied to another key or tenant does not open. Records written without
// keys (encrypt off, or a vault from before encryption) stay readable as
// they are until they age out: they are filed under their content digests,
// and nothing new is written in plain text while keys are present.

// contentSealed marks a sealed content record.
const contentSealed = 0x20

// ErrSealed means a sealed record was read without the tenant's keys.
var ErrSealed = errors.New("vault: record is encrypted and the request carries no key for it")

// Unreadable reports whether err, from Get, means the stored record did
// not read back intact (checksum, tag or identity) or could not be opened
// with the request's keys: an answer for that artifact (vault_error), not
// an outage of the store.
func Unreadable(err error) bool {
	return errors.Is(err, errCodec) || errors.Is(err, ErrDigest) || errors.Is(err, ErrSealed)
}

// ErrPlain is a plain-text record read with keys: the caller writes it
// again sealed (a migration on use; unused records age out as they are).
var ErrPlain = errors.New("vault: record stored in plain text")

// contentAD is what a sealed record is bound to: its tenant and digest.
func contentAD(tenant string, d artifact.Digest) []byte {
	ad := make([]byte, 0, 32+len(tenant)+len(d))
	ad = append(ad, "token-terminator/artifact/v1\x00"...)
	ad = append(ad, tenant...)
	ad = append(ad, 0)
	return append(ad, d[:]...)
}

// sealContent returns enc (an encoded content record of tenant's d) sealed
// under k; with no keys, enc itself.
func sealContent(k *seal.Keys, tenant string, d artifact.Digest, enc []byte) []byte {
	if k == nil {
		return enc
	}
	out := make([]byte, 1, 1+len(enc)+seal.Overhead)
	out[0] = contentSealed
	return k.Seal(out, enc, contentAD(tenant, d))
}

// openContent returns the encoded content record stored as v for tenant's
// d: v itself when it was written in plain text, else its opened form. A
// sealed record that does not authenticate is an error (errCodec wrapped),
// never other content.
func openContent(k *seal.Keys, tenant string, d artifact.Digest, v []byte) ([]byte, error) {
	if len(v) == 0 || v[0] != contentSealed {
		return v, nil
	}
	if k == nil {
		return nil, ErrSealed
	}
	plain, err := k.Open(nil, v[1:], contentAD(tenant, d))
	if err != nil {
		return nil, fmt.Errorf("%w: artifact %x: %v", errCodec, d[:8], err)
	}
	return plain, nil
}

// isSealed reports whether v is a sealed record of plausible size: what a
// reader without keys (the background scrub) can check of it. The tag is
// checked when a request with the keys reads it.
func isSealed(v []byte) bool { return len(v) >= 1+seal.Overhead && v[0] == contentSealed }

// Keyed identities: with keys, an artifact is filed under k.ID of its
// content identity (compiler.Request.KeyID), so its key in the store, its
// metadata and its receipt confirm nothing about its content.

// namesNew is NamesNew for an artifact written with k: only the keyed
// identity is accepted, so nothing is filed under a content hash.
func namesNew(k *seal.Keys, d artifact.Digest, text string, raw []byte) bool {
	if k == nil {
		return NamesNew(d, text, raw)
	}
	return k.ID(artifact.DigestOf(text, raw)) == d
}

// namesStored is NamesStored for a record read with k: a sealed record
// must carry its keyed identity, a plain one (written without keys) its
// content identity.
func namesStored(k *seal.Keys, sealed bool, d artifact.Digest, text, raw []byte) bool {
	if !sealed {
		return NamesStored(d, text, raw)
	}
	return k != nil && k.ID(artifact.DigestOf(unsafe.String(unsafe.SliceData(text), len(text)), raw)) == d
}

// NamesStoredFor is namesStored for the other backends; sealed is whether
// the record read was sealed (its first byte, see IsSealed).
func NamesStoredFor(k *seal.Keys, sealed bool, d artifact.Digest, text, raw []byte) bool {
	return namesStored(k, sealed, d, text, raw)
}

// IsSealed reports whether a stored content record is sealed.
func IsSealed(v []byte) bool { return isSealed(v) }

// SealContent is sealContent for the other backends.
func SealContent(k *seal.Keys, tenant string, d artifact.Digest, enc []byte) []byte {
	return sealContent(k, tenant, d, enc)
}

// OpenContent is openContent for the other backends.
func OpenContent(k *seal.Keys, tenant string, d artifact.Digest, v []byte) ([]byte, error) {
	return openContent(k, tenant, d, v)
}

// CheckSealedContent reports whether stored content decodes, passes its CRC
// and is the artifact d (NamesStored). A sealed record is opened with k;
// without keys (the scrub) only its form is checked, and a request with
// the keys finds any other damage by its tag.
func CheckSealedContent(v []byte, tenant string, d artifact.Digest, k *seal.Keys) error {
	if k == nil && isSealed(v) {
		return nil
	}
	if k != nil && !isSealed(v) {
		// Written in plain text before encryption was on: dropped and
		// written again sealed, as a record that no longer reads intact.
		return ErrPlain
	}
	sealed := isSealed(v)
	v, err := openContent(k, tenant, d, v)
	if err != nil {
		return err
	}
	c, err := ContentFields(v)
	if err != nil {
		return err
	}
	if !namesStored(k, sealed, d, c.Text, c.Raw) {
		return ErrDigest
	}
	return nil
}
