package integration

import (
	"context"
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
