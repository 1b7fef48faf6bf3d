package badgervault

import (
	"encoding/hex"
	"hash/fnv"
	"math/rand/v2"
)

// randomText returns n bytes of incompressible hex text determined by seed,
// so stored sizes on disk are close to their plain sizes.
func randomText(seed string, n int) string {
	h := fnv.New64a()
	h.Write([]byte(seed))
	var key [32]byte
	s := h.Sum64()
	for i := range key {
		key[i] = byte(s >> (8 * (i % 8)))
		key[i] ^= byte(i)
	}
	r := rand.NewChaCha8(key)
	b := make([]byte, (n+1)/2)
	r.Read(b)
	return hex.EncodeToString(b)[:n]
}
