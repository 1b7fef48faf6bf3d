//go:build unix

// Package redistest starts a redis-server for a test (the Redis vault's
// own tests, the gateway's module and fleet tests): loopback, a free port,
// its own directory, stopped by PID in Cleanup. A test skips when
// redis-server is not installed.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one test's redis-server.
type Server struct {
	t    testing.TB
	bin  string
	Port int
	Dir  string
	args []string
	cmd  *exec.Cmd
}

// Start starts redis-server with no persistence unless extra says
// otherwise (later options win), or skips the test when the binary is
// missing.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not found in PATH: install it (apt-get install redis-server) to run the Redis tests")
	}
	port := FreePort(t)
	s := &Server{t: t, bin: bin, Port: port, Dir: t.TempDir()}
	s.args = append([]string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", s.Dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", filepath.Join(s.Dir, "redis.log")}, extra...)
	t.Cleanup(s.Kill) // first: a server that never answers is stopped too
	s.Restart()
	return s
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// With adds options for the next Restart (later options win).
func (s *Server) With(extra ...string) { s.args = append(s.args, extra...) }

// Pause and Resume freeze the server (SIGSTOP/SIGCONT): connections stay
// open and nothing answers, like a stalled server.
func (s *Server) Pause()  { s.cmd.Process.Signal(syscall.SIGSTOP) }
func (s *Server) Resume() { s.cmd.Process.Signal(syscall.SIGCONT) }

// URL is the server's redis:// URL, database 0.
func (s *Server) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.Port) }

// Restart starts the server (again, with the same options and directory)
// and waits until it answers PING, 5s at most.
func (s *Server) Restart() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, s.args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.Port), DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(5 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.Kill()
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			s.t.Fatalf("redis-server did not start: %v\n%s", err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGCONT) // let a paused server be reaped promptly
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Client is a plain client for inspecting or configuring the server,
// closed in Cleanup.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.Port), MaxRetries: -1})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// KeysHolding returns the keys whose name, DUMP, or value read by type
// (string, hash fields and values, set, sorted set and list members)
// holds marker. The test fails when the server holds no key at all: a
// check of nothing proves nothing.
func (s *Server) KeysHolding(t testing.TB, marker string) []string {
	t.Helper()
	ctx := context.Background()
	c := s.Client()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys: %d, %v", len(keys), err)
	}
	var holding []string
	for _, k := range keys {
		vals := []string{k}
		if d, err := c.Dump(ctx, k).Result(); err == nil {
			vals = append(vals, d)
		}
		switch typ, _ := c.Type(ctx, k).Result(); typ {
		case "string":
			v, _ := c.Get(ctx, k).Result()
			vals = append(vals, v)
		case "hash":
			m, _ := c.HGetAll(ctx, k).Result()
			for f, v := range m {
				vals = append(vals, f, v)
			}
		case "zset":
			m, _ := c.ZRange(ctx, k, 0, -1).Result()
			vals = append(vals, m...)
		case "set":
			m, _ := c.SMembers(ctx, k).Result()
			vals = append(vals, m...)
		case "list":
			m, _ := c.LRange(ctx, k, 0, -1).Result()
			vals = append(vals, m...)
		}
		for _, v := range vals {
			if strings.Contains(v, marker) {
				holding = append(holding, k)
				break
			}
		}
	}
	return holding
}
