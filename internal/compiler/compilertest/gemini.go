package compilertest

import "github.com/tokenterminator/caddy-token-terminator/internal/fixtures"

// GeminiOptions is fixtures.GeminiOptions.
type GeminiOptions = fixtures.GeminiOptions

// GeminiBody is fixtures.GeminiBody.
func GeminiBody(turns []ChatTurn, final string, o GeminiOptions) []byte {
	return fixtures.GeminiBody(turns, final, o)
}

// GeminiPath is fixtures.GeminiPath.
func GeminiPath(model string, stream bool) string { return fixtures.GeminiPath(model, stream) }
