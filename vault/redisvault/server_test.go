//go:build unix

// The Redis tests start redis-server processes and signal them (SIGSTOP,
// SIGKILL), so they run on Unix only.

package redisvault

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is a redis-server of one test: loopback, its own port and temp
// directory, stopped by PID in Cleanup.
type server struct {
	t    testing.TB
	bin  string
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

// startServer starts redis-server with no persistence unless extra says
// otherwise (later options win), or skips the test when the binary is
// missing.
func startServer(t testing.TB, extra ...string) *server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not found in PATH: install it (apt-get install redis-server) to run the Redis vault tests")
	}
	s := &server{t: t, bin: bin, port: freePort(t), dir: t.TempDir()}
	s.args = append([]string{"--port", fmt.Sprint(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", filepath.Join(s.dir, "redis.log")}, extra...)
	t.Cleanup(s.kill) // first: a server that never answers is stopped too
	s.start()
	return s
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (s *server) url() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

// start runs the server and waits until it answers PING (5s at most).
func (s *server) start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, s.args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.port), DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.kill()
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redis-server did not start: %v\n%s", err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill stops the server at once (SIGKILL), as a crash would.
func (s *server) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGCONT) // let a paused server be reaped promptly
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// pause and resume freeze the server (SIGSTOP/SIGCONT): connections stay
// open and nothing answers, like a stalled server.
func (s *server) pause()  { s.cmd.Process.Signal(syscall.SIGSTOP) }
func (s *server) resume() { s.cmd.Process.Signal(syscall.SIGCONT) }

// client is a plain client for inspecting or configuring the server.
func (s *server) client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.port), MaxRetries: -1})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// open opens a Store on s with cfg (URL filled in) and closes it in Cleanup.
func (s *server) open(t testing.TB, cfg Config) *Store {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = s.url()
	}
	st, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
