//go:build unix

// The Redis tests start redis-server processes and signal them (SIGSTOP,
// SIGKILL), so they run on Unix only.

package redisvault

import (
	"context"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault/redisvault/redistest"
)

// server is a redis-server of one test (redistest), with a Store opener.
type server struct{ *redistest.Server }

// startServer starts redis-server with no persistence unless extra says
// otherwise, or skips the test when the binary is missing.
func startServer(t testing.TB, extra ...string) *server {
	return &server{redistest.Start(t, extra...)}
}

// open opens a Store on s with cfg (URL filled in) and closes it in Cleanup.
func (s *server) open(t testing.TB, cfg Config) *Store {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = s.URL()
	}
	st, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
