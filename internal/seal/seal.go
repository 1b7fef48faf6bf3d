// Package seal is the gateway's encryption at rest: per-tenant data keys
// derived from a secret the vault does not hold, and an authenticated
// cipher that binds every sealed value to where it is filed.
//
// Keys are derived with HKDF-SHA-256 from the tenant's secret (the provider
// credential a request carries, or "tenant\x00" and the configured identity)
// with the gateway's tenant key as the salt. They are never stored: whatever
// authenticates a read (a request of the conversation, the artifact API)
// carries the secret and derives them again.
//
// Values are sealed with AES-256-GCM (crypto/cipher: hardware AES on every
// platform the gateway ships for, no dependency outside the standard
// library). The nonce is synthetic (an SIV construction): the first 12 bytes
// of HMAC-SHA-256, under a key of its own, over the associated data and the
// plain text. Sealing is therefore deterministic: one artifact sealed twice
// (two requests, two gateways of a fleet) writes identical bytes, which the
// vault's write-then-read-back check and its idempotent writes rely on, and
// a nonce can only repeat for an identical (associated data, plain text)
// pair, which reveals nothing the record's own key does not. A random nonce
// would be as safe for secrecy, but would make concurrent writers of one
// artifact disagree on its bytes.
package seal

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"sync"
)

// NonceSize and Overhead are the bytes a sealed value adds to its plain
// text: the nonce in front, GCM's tag at the end.
const (
	NonceSize = 12
	Overhead  = NonceSize + 16
)

// ErrOpen means a sealed value did not authenticate: the wrong key, other
// associated data (a value moved to another record), or changed bytes.
var ErrOpen = errors.New("seal: value does not authenticate")

// Info strings separate the keys derived from one secret.
const (
	infoAEAD  = "token-terminator/seal/v1/aead"
	infoNonce = "token-terminator/seal/v1/nonce"
	infoID    = "token-terminator/seal/v1/id"
)

// Keys are one tenant's data keys. They are safe for concurrent use.
type Keys struct {
	aead  cipher.AEAD
	nonce sync.Pool // of hash.Hash: HMAC-SHA-256 under the nonce key
	id    sync.Pool // of hash.Hash: HMAC-SHA-256 under the id key
}

// Derive returns the data keys of the tenant whose secret is secret, under
// the gateway's tenant key. Both must be non-empty: a key derived from a
// public value would protect nothing.
func Derive(tenantKey []byte, secret string) (*Keys, error) {
	if len(tenantKey) == 0 || secret == "" {
		return nil, errors.New("seal: a tenant key and a secret are required")
	}
	prk, err := hkdf.Extract(sha256.New, []byte(secret), tenantKey)
	if err != nil {
		return nil, err
	}
	ak, err := hkdf.Expand(sha256.New, prk, infoAEAD, 32)
	if err != nil {
		return nil, err
	}
	nk, err := hkdf.Expand(sha256.New, prk, infoNonce, 32)
	if err != nil {
		return nil, err
	}
	ik, err := hkdf.Expand(sha256.New, prk, infoID, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(ak)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	k := &Keys{aead: aead}
	k.nonce.New = func() any { return hmac.New(sha256.New, nk) }
	k.id.New = func() any { return hmac.New(sha256.New, ik) }
	return k, nil
}

// ID returns the keyed identity of content whose unkeyed identity (a
// SHA-256 of it) is d: HMAC-SHA-256 under the tenant's id key. The same
// content gets the same id within a tenant, so receipts stay byte-stable
// for prompt caches, and unrelated ids in two tenants; without the key an
// id confirms nothing about a guessed content.
func (k *Keys) ID(d [32]byte) [32]byte {
	h := k.id.Get().(hash.Hash)
	h.Reset()
	h.Write([]byte("token-terminator/id/v1\x00"))
	h.Write(d[:])
	var out [32]byte
	h.Sum(out[:0])
	k.id.Put(h)
	return out
}

// Seal appends to dst the sealed form of plain bound to ad: a synthetic
// nonce, then the ciphertext and tag. The same keys, ad and plain always
// give the same bytes.
func (k *Keys) Seal(dst, plain, ad []byte) []byte {
	h := k.nonce.Get().(hash.Hash)
	h.Reset()
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(ad)))])
	h.Write(ad)
	h.Write(plain)
	var sum [sha256.Size]byte
	nonce := h.Sum(sum[:0])[:NonceSize]
	k.nonce.Put(h)
	dst = append(dst, nonce...)
	return k.aead.Seal(dst, nonce, plain, ad)
}

// Open appends to dst the plain text of sealed, which must have been sealed
// under these keys with the same ad; anything else is ErrOpen, never other
// content.
func (k *Keys) Open(dst, sealed, ad []byte) ([]byte, error) {
	if len(sealed) < Overhead {
		return nil, ErrOpen
	}
	out, err := k.aead.Open(dst, sealed[:NonceSize], sealed[NonceSize:], ad)
	if err != nil {
		return nil, ErrOpen
	}
	return out, nil
}

type ctxKey struct{}

// NewContext returns ctx carrying k: the vault seals what it writes and
// opens what it reads under the keys of the request's tenant.
func NewContext(ctx context.Context, k *Keys) context.Context {
	if k == nil {
		return ctx
	}
	return context.WithValue(ctx, ctxKey{}, k)
}

// FromContext returns the keys ctx carries, nil when none (encryption off,
// or a caller without the tenant's secret).
func FromContext(ctx context.Context) *Keys {
	k, _ := ctx.Value(ctxKey{}).(*Keys)
	return k
}
