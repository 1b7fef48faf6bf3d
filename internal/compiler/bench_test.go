package compiler_test

import (
	"context"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
)

// The compiler alone, with an in-memory store; the vault's cost is measured
// by the same benchmark in package vault.
func BenchmarkCompile1MBWarm(b *testing.B) {
	compilertest.BenchCompile1MB(b, compilertest.NewMemStore(), false)
}
func BenchmarkCompile1MBCold(b *testing.B) {
	compilertest.BenchCompile1MB(b, compilertest.NewMemStore(), true)
}

// BenchmarkNonCandidate is the cost of deciding that a request is not ours.
func BenchmarkNonCandidate(b *testing.B) {
	c, _ := compiler.New(compiler.Options{}, compilertest.NewMemStore(), nil)
	req := compiler.Request{Path: "/v1/embeddings", Body: []byte(`{"input":"x"}`), Mode: compiler.ModeEnforce}
	for i := 0; i < b.N; i++ {
		if _, ok := compiler.FormatFor("POST", req.Path); ok {
			b.Fatal("candidate")
		}
		c.Compile(context.Background(), req)
	}
}
