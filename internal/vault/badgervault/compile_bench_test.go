package badgervault_test

import (
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/badgervault"
)

// The compiler with the real vault: a 1 MB chat request whose 50 tool
// results of ~20 KB all go out as receipts. Warm: already vaulted. Cold:
// every iteration is a new tenant, so all 50 are written in one synced
// batch, read back and compared.
func BenchmarkCompile1MBWarm(b *testing.B) { compilertest.BenchCompile1MB(b, openBench(b), false) }
func BenchmarkCompile1MBCold(b *testing.B) { compilertest.BenchCompile1MB(b, openBench(b), true) }

// The same with encryption at rest (keyed ids, sealed content).
func BenchmarkCompile1MBWarmSealed(b *testing.B) {
	compilertest.BenchCompileSealed1MB(b, openBench(b), false)
}
func BenchmarkCompile1MBColdSealed(b *testing.B) {
	compilertest.BenchCompileSealed1MB(b, openBench(b), true)
}

func openBench(b *testing.B) *badgervault.Store {
	s, err := badgervault.Open(badgervault.Config{Dir: b.TempDir(), MaxBytes: 8 << 30})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}
