package vault

import (
	"errors"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// Defaults applied by Open to zero (or negative) Config fields.
const (
	DefaultMaxBytes         int64 = 512 << 20
	DefaultMaxArtifactBytes int64 = 8 << 20
	DefaultRetention              = 7 * 24 * time.Hour
)

var (
	// ErrFull means the vault has no room for new artifacts even after
	// evicting everything not protected by retention. Callers pass the
	// request through unchanged.
	ErrFull = artifact.ErrFull
	// ErrTooLarge means one artifact exceeds Config.MaxArtifactBytes.
	ErrTooLarge = errors.New("vault: artifact too large")
	// ErrDigest means an artifact's Digest is not artifact.DigestOf of
	// its Text and Raw (NamesNew), or a stored
	// record does not match the digest it is filed under.
	ErrDigest = errors.New("vault: digest mismatch")
	// ErrReadBack means a freshly written artifact did not read back
	// byte for byte.
	ErrReadBack = errors.New("vault: read-back mismatch")
	// ErrClosed is returned by every operation after Close.
	ErrClosed = errors.New("vault: closed")
)
