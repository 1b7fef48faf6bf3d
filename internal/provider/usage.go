package provider

import "cmp"

// Usage is what the provider reported about one response's tokens. Fields
// are zero when the provider did not report them; Known is false when no
// usage object was seen at all (an error body, a truncated stream).
type Usage struct {
	Input      int // uncached + cached input tokens as billed (OpenAI prompt/input tokens; Anthropic input_tokens + cache fields)
	Output     int
	CacheRead  int // Anthropic cache_read_input_tokens; OpenAI *_tokens_details.cached_tokens
	CacheWrite int // Anthropic cache_creation_input_tokens
	// CacheWrite1h is the part of CacheWrite written with the 1-hour TTL
	// (Anthropic cache_creation.ephemeral_1h_input_tokens).
	CacheWrite1h int
	// Model is the model the answer names (prices the usage when the
	// request's body was not read); empty when it names none.
	Model string
	Known bool
}

// Add sums two usages (recovery rounds are billed separately and reported as one).
func (u Usage) Add(v Usage) Usage {
	return Usage{
		Input: u.Input + v.Input, Output: u.Output + v.Output,
		CacheRead: u.CacheRead + v.CacheRead, CacheWrite: u.CacheWrite + v.CacheWrite,
		CacheWrite1h: u.CacheWrite1h + v.CacheWrite1h,
		Model:        cmp.Or(u.Model, v.Model),
		Known:        u.Known || v.Known,
	}
}
