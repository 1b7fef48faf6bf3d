package vault

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/seal"
)

// What every backend's Persist shares: the record of an artifact is
// checked and encoded here, so every backend stores the same bytes.

// StringBytes views s as bytes without copying, for read-only use: hashing
// every artifact of a warm request is the hot path's main cost, and a copy
// would add a megabyte of garbage per request. Every backend uses it.
func StringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// ArtifactSize is what an artifact counts against a vault's capacity and
// quota, in every backend.
func ArtifactSize(a *artifact.Artifact) int64 { return int64(len(a.Text)) + int64(len(a.Raw)) }

// Unique enforces the per-artifact cap maxArt and drops repeated digests
// (the first copy wins): the first step of every backend's Persist.
func Unique(arts []artifact.Artifact, maxArt int64) ([]*artifact.Artifact, error) {
	uniq := make([]*artifact.Artifact, 0, len(arts))
	seen := make(map[artifact.Digest]struct{}, len(arts))
	for i := range arts {
		a := &arts[i]
		if n := ArtifactSize(a); n > maxArt {
			return nil, fmt.Errorf("%w: %d bytes, cap %d", ErrTooLarge, n, maxArt)
		}
		if _, dup := seen[a.Digest]; dup {
			continue
		}
		seen[a.Digest] = struct{}{}
		uniq = append(uniq, a)
	}
	return uniq, nil
}

// EncodeAll checks every artifact's digest and encodes its content, in
// parallel when there is enough of it to pay for the goroutines. An
// artifact's check and encoding run back to back on one core, so its bytes
// are read from memory once and stay in cache for the passes that follow.
func EncodeAll(arts []*artifact.Artifact) ([][]byte, error) { return EncodeAllFor(nil, arts) }

// EncodeAllFor is EncodeAll for artifacts written with k (nil: EncodeAll):
// each must be named by its keyed identity. The forms returned are not
// sealed yet (SealContent).
func EncodeAllFor(k *seal.Keys, arts []*artifact.Artifact) ([][]byte, error) {
	enc := make([][]byte, len(arts))
	var total int64
	for _, a := range arts {
		total += ArtifactSize(a)
	}
	workers := min(runtime.GOMAXPROCS(0), len(arts))
	if total < parallelEncodeBytes || workers < 2 {
		for i, a := range arts {
			if !namesNew(k, a.Digest, a.Text, a.Raw) {
				return nil, errNotIdentity(a)
			}
			enc[i] = EncodeContent(a)
		}
		return enc, nil
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(arts); i = int(next.Add(1) - 1) {
				if namesNew(k, arts[i].Digest, arts[i].Text, arts[i].Raw) {
					enc[i] = EncodeContent(arts[i])
				}
			}
		}()
	}
	wg.Wait()
	for i, a := range arts {
		if enc[i] == nil { // the only way to get no encoding
			return nil, errNotIdentity(a)
		}
	}
	return enc, nil
}

// errNotIdentity refuses to write a: a wrong digest would file content
// under a receipt that names something else. Only what is written needs the
// check: an artifact already stored under its digest was checked when it
// was written.
func errNotIdentity(a *artifact.Artifact) error {
	return fmt.Errorf("%w: artifact %x is not the identity of its text and raw bytes", ErrDigest, a.Digest[:8])
}

// parallelEncodeBytes is the content size from which EncodeAll uses every
// core: s2 compresses ~1 GB/s, so below this a goroutine costs more than it
// saves.
const parallelEncodeBytes = 256 << 10
