package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// globalOptions are the benchmark Caddy's: an admin endpoint (profiles),
// no saved config, and the JSON log the per-request fields are read from.
const globalOptions = `{
	admin $ADMIN
	persist_config off
	grace_period 2s
	log {
		output file $LOG
		format json
		level INFO
	}
}
`

// defaultCaddyfile is the gateway of the benchmark: defaults (token gate
// on, compaction on, the embedded vault) in front of reverse_proxy. $LISTEN,
// $ADMIN, $UPSTREAM, $VAULT and $LOG are replaced.
const defaultCaddyfile = globalOptions + `
http://$LISTEN {
	token_terminator {
		vault_dir $VAULT
		# Cold and first runs make a tenant per conversation.
		max_new_tenants_per_minute 1000000
	}
	reverse_proxy $UPSTREAM
}
`

// floorCaddyfile is defaultCaddyfile without the handler (-floor): the
// same Caddy, logging and upstream, so the difference between the two runs
// is what token_terminator adds and the floor is what Caddy's own proxying
// costs (reading the body, a second connection, writing it on).
const floorCaddyfile = globalOptions + `
http://$LISTEN {
	reverse_proxy $UPSTREAM
}
`

// floorCases refuses what -floor cannot measure: cold and first cases
// judge the gateway's work, and a Caddyfile of one's own may hold it.
func floorCases(modes []string, caddyfile string) error {
	for _, m := range modes {
		if m != "warm" {
			return fmt.Errorf("-floor: -modes %q: only warm (cold and first judge the gateway's work)", m)
		}
	}
	if caddyfile != "" {
		return fmt.Errorf("-floor: -caddyfile %q: -floor brings its own Caddyfile", caddyfile)
	}
	return nil
}

// buildCaddy builds ./cmd/caddy of the module in dir (the repository
// root) into out. tags are Go build tags (ttbench: profile rates set).
func buildCaddy(ctx context.Context, dir, out, tags string) error {
	args := []string{"build", "-o", out}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	args = append(args, "./cmd/caddy")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/caddy: %w", err)
	}
	return nil
}

// moduleRoot finds the directory of go.mod from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(data, []byte("caddy-token-terminator")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the caddy-token-terminator module: give -caddy")
		}
		dir = parent
	}
}

// gateway is a running Caddy process.
type gateway struct {
	cmd       *exec.Cmd
	url       string // http://127.0.0.1:port
	admin     string // host:port of the admin API
	dir       string
	exited    chan struct{}
	exitErr   error
	logPath   string
	stderrBuf *bytes.Buffer
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startGateway writes the Caddyfile template with its placeholders
// replaced into a new directory under tmp and starts bin on it, with its
// data and config directories there too. The vault is vaultDir, or a new
// one there when vaultDir is empty. It returns once the site answers.
func startGateway(ctx context.Context, bin, template, tmp, upstream, vaultDir string) (*gateway, error) {
	dir, err := os.MkdirTemp(tmp, "caddy-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	adminPort, err := freePort()
	if err != nil {
		return nil, err
	}
	g := &gateway{
		url:     fmt.Sprintf("http://127.0.0.1:%d", port),
		admin:   fmt.Sprintf("127.0.0.1:%d", adminPort),
		dir:     dir,
		exited:  make(chan struct{}),
		logPath: filepath.Join(dir, "caddy.log"),
	}
	cfg := strings.NewReplacer(
		"$LISTEN", fmt.Sprintf("127.0.0.1:%d", port),
		"$ADMIN", g.admin,
		"$UPSTREAM", upstream,
		"$VAULT", cmp.Or(vaultDir, filepath.Join(dir, "vault")),
		"$LOG", g.logPath,
	).Replace(template)
	cfgPath := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	g.cmd = exec.Command(bin, "run", "--config", cfgPath, "--adapter", "caddyfile")
	g.cmd.Dir = dir
	g.cmd.Env = append(os.Environ(),
		"HOME="+dir,
		"XDG_DATA_HOME="+filepath.Join(dir, "data"),
		"XDG_CONFIG_HOME="+filepath.Join(dir, "config"),
	)
	g.stderrBuf = &bytes.Buffer{}
	g.cmd.Stdout = io.Discard
	g.cmd.Stderr = &limitedWriter{w: g.stderrBuf, n: 64 << 10}
	if err := g.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { g.exitErr = g.cmd.Wait(); close(g.exited) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			c.Close()
			return g, nil
		}
		select {
		case <-g.exited:
			return nil, fmt.Errorf("caddy exited at start (%v): %s", g.exitErr, g.stderrBuf.String())
		case <-ctx.Done():
			g.stop()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			g.stop()
			return nil, fmt.Errorf("caddy not listening after 2 minutes: %s", g.stderrBuf.String())
		}
	}
}

type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(l.n, len(p))
		l.n -= k
		_, _ = l.w.Write(p[:k])
	}
	return len(p), nil
}

// stop ends the Caddy process (SIGINT, then SIGKILL after 10 s).
func (g *gateway) stop() {
	if g == nil || g.cmd.Process == nil {
		return
	}
	_ = g.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-g.exited:
	case <-time.After(10 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.exited
	}
}

func (g *gateway) pid() int { return g.cmd.Process.Pid }

// cpuTicks returns utime+stime of the process (all its threads) in clock
// ticks, from /proc/<pid>/stat.
func cpuTicks(pid int) (int64, error) {
	t, _, err := procStat(pid)
	return t, err
}

// procStat returns utime+stime in clock ticks and the minor page faults of
// the process, from /proc/<pid>/stat.
func procStat(pid int) (ticks, minflt int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, errors.New("unexpected /proc/pid/stat")
	}
	f := strings.Fields(string(data[i+1:]))
	// fields after ")": state is f[0], so utime (field 14) is f[11], stime f[12].
	if len(f) < 13 {
		return 0, 0, errors.New("short /proc/pid/stat")
	}
	// minflt (field 10) is f[7].
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	m, err3 := strconv.ParseInt(f[7], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, 0, errors.New("unexpected /proc/pid/stat fields")
	}
	return u + s, m, nil
}

// clockTick is USER_HZ: 100 on every Linux architecture Go supports.
const clockTick = 100

// statusKB returns a field of /proc/<pid>/status in KiB (VmHWM, VmRSS).
func statusKB(pid int, field string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			v, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return -1
			}
			return v
		}
	}
	return -1
}

// profile fetches path from the admin API's pprof handlers into file.
func (g *gateway) profile(path, file string) error {
	c := &http.Client{Timeout: 5 * time.Minute}
	resp, err := c.Get("http://" + g.admin + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
