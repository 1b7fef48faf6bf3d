//go:build unix

package redisvault

import (
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
)

// The compiler on a local Redis, next to vault's Badger benchmarks of the
// same names: a 1 MB chat request whose 50 tool results of ~20 KB all go out
// as receipts. Warm: already vaulted (one verify script). Cold: a new tenant
// per iteration, so all 50 are written in one script, read back and
// compared. The server runs as recommended: appendonly, fsync every second.
// The op timeout is raised so that a load spike on a shared machine shows
// up in p99 instead of aborting the run with a (fail-open) vault_error.
func BenchmarkCompile1MBWarm(b *testing.B) { compilertest.BenchCompile1MB(b, openBench(b), false) }
func BenchmarkCompile1MBCold(b *testing.B) { compilertest.BenchCompile1MB(b, openBench(b), true) }

func openBench(b *testing.B) *Store {
	srv := startServer(b, "--appendonly", "yes", "--appendfsync", "everysec")
	return srv.open(b, Config{MaxBytes: 8 << 30, TenantMaxBytes: 8 << 30, OpTimeout: 10 * time.Second})
}
