package compilertest

// CacheCost prices one request the way a provider with exact-prefix prompt
// caching does (Anthropic's prices, in byte units): the prefix it shares
// with the previous request of the session is a cache read at 0.1x, the
// rest a cache write at 1.25x.
func CacheCost(prev, cur []byte) float64 {
	n := CommonPrefix(prev, cur)
	return 0.1*float64(n) + 1.25*float64(len(cur)-n)
}

// CommonPrefix returns the length of the longest common prefix of a and b.
func CommonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
