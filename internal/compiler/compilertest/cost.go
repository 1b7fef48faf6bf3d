package compilertest

import "github.com/tokenterminator/caddy-token-terminator/internal/fixtures"

// CacheCost prices one request the way a provider with exact-prefix prompt
// caching does (Anthropic's prices, in byte units): the prefix it shares
// with the previous request of the session is a cache read at 0.1x, the
// rest a cache write at 1.25x. It ignores render order, TTL and minimum
// prefix; cmd/tt-replay simulates those (cost.Simulator).
func CacheCost(prev, cur []byte) float64 {
	n := fixtures.CommonPrefix(prev, cur)
	return 0.1*float64(n) + 1.25*float64(len(cur)-n)
}
