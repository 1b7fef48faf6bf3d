package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// npmInstall returns a node_modules directory holding packages: the cached
// one ($TT_NPM_CACHE or os.UserCacheDir(), under name) when complete, else
// a fresh npm install, moved into the cache whole when it is writable. It
// skips the test when npm cannot install (registry unreachable).
func npmInstall(t *testing.T, name string, packages ...string) string {
	t.Helper()
	base, err := os.Getenv("TT_NPM_CACHE"), error(nil)
	if base == "" {
		base, err = userCacheDir, userCacheErr
	}
	stamp := strings.Join(packages, " ")
	complete := func(dir string) bool {
		b, err := os.ReadFile(filepath.Join(dir, "tt-packages"))
		return err == nil && string(b) == stamp
	}
	var cache string
	if err == nil && base != "" {
		cache = filepath.Join(base, name)
		if complete(cache) {
			return filepath.Join(cache, "node_modules")
		}
	}
	tmp := t.TempDir()
	if cache != "" {
		if err := os.MkdirAll(base, 0o755); err == nil {
			if d, err := os.MkdirTemp(base, name+"-*"); err == nil {
				tmp = d
				defer os.RemoveAll(d) // no-op after a successful rename
			}
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, "package.json"), []byte(`{"name":"tt-npm-test","private":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", append([]string{"install", "--no-audit", "--no-fund", "--loglevel=error"}, packages...)...)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("npm install %s failed (registry unreachable?): %v\n%s", stamp, err, out)
	}
	if err := os.WriteFile(filepath.Join(tmp, "tt-packages"), []byte(stamp), 0o644); err != nil {
		t.Fatal(err)
	}
	if cache != "" && strings.HasPrefix(tmp, base) {
		os.RemoveAll(cache)
		if err := os.Rename(tmp, cache); err == nil {
			return filepath.Join(cache, "node_modules")
		}
	}
	return filepath.Join(tmp, "node_modules")
}

// needNode skips the test (what: "SDK test", "agent CLI test") in -short
// mode or when node or npm is missing: it installs npm packages and runs
// node (Codex's npm entry point is a node script too).
func needNode(t *testing.T, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("%s skipped in -short mode", what)
	}
	for _, tool := range []string{"npm", "node"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: the %s installs npm packages and runs node", tool, what)
		}
	}
}

// nodeWork is a work directory for a node script: node_modules linked to
// modules, script written as drive.mjs, and each of files (name → bytes)
// beside it.
func nodeWork(t *testing.T, modules, script string, files map[string][]byte) string {
	t.Helper()
	work := t.TempDir()
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(work, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(work, "drive.mjs"), []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	return work
}

// runNode runs drive.mjs in work with args, two minutes at most, and
// returns the JSON object of strings it printed; the test fails when node
// fails or prints anything else.
func runNode(t *testing.T, work string, args ...string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{"drive.mjs"}, args...)...)
	cmd.Dir = work
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node: %v\nstdout: %.2000s\nstderr: %.2000s", err, stdout.String(), stderr.String())
	}
	var got map[string]string
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("node output: %v\n%.2000s\nstderr: %.2000s", err, stdout.String(), stderr.String())
	}
	return got
}
