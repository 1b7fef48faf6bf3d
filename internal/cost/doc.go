// Package cost is the billing model of Token Terminator: what a provider
// charges for a prompt, given the part of it the provider's prompt cache
// already holds. It is pure (no I/O, no clock of its own).
//
// Costs are in base-input-token units: one uncached, unwritten input token
// costs 1. A cache read costs Model.CacheRead per token, a cache write
// Model.CacheWrite (Anthropic bills writes at a premium; OpenAI writes are
// free, so 1). Without a tokenizer, tokens are estimated from bytes at
// BytesPerToken.
//
// The compiler uses Model to choose between plans for a request (the
// original, the stable plan that keeps the cached prefix, the full plan);
// cmd/tt-replay uses Simulator to bill whole sessions as a provider would.
package cost
