package compilertest

import "github.com/tokenterminator/caddy-token-terminator/internal/fixtures"

// The request generators live in internal/fixtures (no testing import);
// these names keep tests unchanged.
type (
	ChatTurn         = fixtures.ChatTurn
	ResponsesOptions = fixtures.ResponsesOptions
	AnthropicOptions = fixtures.AnthropicOptions
)

// ToolOutput is fixtures.ToolOutput.
func ToolOutput(seed, n int) string { return fixtures.ToolOutput(seed, n) }

// ChatBody is fixtures.ChatBody.
func ChatBody(model string, turns []ChatTurn, final string) []byte {
	return fixtures.ChatBody(model, turns, final)
}

// Turns is fixtures.Turns.
func Turns(seed, n, size int) []ChatTurn { return fixtures.Turns(seed, n, size) }

// ResponsesBody is fixtures.ResponsesBody.
func ResponsesBody(model string, turns []ChatTurn, final string, o ResponsesOptions) []byte {
	return fixtures.ResponsesBody(model, turns, final, o)
}

// AnthropicBody is fixtures.AnthropicBody.
func AnthropicBody(model string, turns []ChatTurn, final string, o AnthropicOptions) []byte {
	return fixtures.AnthropicBody(model, turns, final, o)
}
