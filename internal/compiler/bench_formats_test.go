package compiler_test

import (
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/fixtures"
)

// The chat benchmark's shape (~1 MB, 50 tool results of 20 KB delivered
// before, so all 50 go out as receipts, plus the newest inline; warm store)
// in the Responses and Anthropic formats, with reasoning items / signed
// thinking blocks and cache_control breakpoints, so the validity check's
// cost shows.
func BenchmarkCompileResponses1MBWarm(b *testing.B) {
	o := fixtures.ResponsesOptions{Reasoning: true}
	compilertest.BenchCompile(b, compilertest.NewMemStore(), responsesPath, func(turns []fixtures.ChatTurn) []byte {
		return fixtures.ResponsesBody("gpt-5", turns, "", o)
	}, false)
}

func BenchmarkCompileAnthropic1MBWarm(b *testing.B) {
	o := fixtures.AnthropicOptions{System: true, Thinking: true, CacheLast: true}
	compilertest.BenchCompile(b, compilertest.NewMemStore(), messagesPath, func(turns []fixtures.ChatTurn) []byte {
		return fixtures.AnthropicBody("claude-sonnet-4-5", turns, "", o)
	}, false)
}
