package integration

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A first run, as a new user meets it (issue 31): `caddy validate` (the
// real command, a built cmd/caddy) has no side effects on the vault, and
// says when a Redis vault cannot be reached; a started gateway writes one
// start-up line per vault and per handler.
func TestFirstRunValidate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/caddy")
	}
	tmp := t.TempDir()
	bin := caddyBinary(t)
	data := filepath.Join(tmp, "data")
	validate := func(name, site string) (string, error) {
		cfg := filepath.Join(tmp, name)
		text := fmt.Sprintf("{\n\tadmin off\n\tpersist_config off\n}\n\nhttp://127.0.0.1:%d {\n%s\n}\n", freePort(t), site)
		if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "validate", "--config", cfg, "--adapter", "caddyfile")
		cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+data, "XDG_CONFIG_HOME="+filepath.Join(tmp, "config"), "HOME="+tmp)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// 1. A fresh install: the default vault (Caddy's data directory) and
	// one named by the config; neither exists after validate.
	named := filepath.Join(tmp, "named-vault")
	out, err := validate("fresh.Caddyfile", `
	route /a/* {
		token_terminator
		reverse_proxy 127.0.0.1:1
	}
	route /b/* {
		token_terminator {
			vault badger {
				dir `+named+`
				max_bytes 64MiB
			}
		}
		reverse_proxy 127.0.0.1:1
	}`)
	if err != nil || !strings.Contains(out, "Valid configuration") {
		t.Fatalf("validate: %v\n%s", err, out)
	}
	for _, p := range []string{named, filepath.Join(data, "caddy", "token-terminator")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("validate left %s behind (%v)", p, err)
		}
	}

	// 2. The gateway runs on a vault (Badger holds its directory lock):
	// validating a config that names it reports nothing about the vault,
	// and changes none of its files.
	up := newUpstream(t)
	vaultDir := filepath.Join(tmp, "vault")
	g := startGateway(t, defaultSnippet, up, vaultDir)
	before := listFiles(t, vaultDir)
	out, err = validate("running.Caddyfile", "\ttoken_terminator {\n\t\tvault_dir "+vaultDir+"\n\t}\n\treverse_proxy 127.0.0.1:1")
	if err != nil || !strings.Contains(out, "Valid configuration") {
		t.Fatalf("validate beside a running gateway: %v\n%s", err, out)
	}
	if strings.Contains(strings.ToLower(out), "lock") || strings.Contains(out, `"level":"error"`) {
		t.Errorf("validate beside a running gateway reported errors:\n%s", out)
	}
	if after := listFiles(t, vaultDir); after != before {
		t.Errorf("validate changed the vault's files:\nbefore %s\nafter  %s", before, after)
	}

	// 3. A Redis vault that cannot be reached validates, with a warning
	// that names it.
	port := freePort(t)
	out, err = validate("redis.Caddyfile", fmt.Sprintf("\ttoken_terminator {\n\t\tvault redis {\n\t\t\turl redis://127.0.0.1:%d/0\n\t\t\top_timeout 300ms\n\t\t}\n\t}\n\treverse_proxy 127.0.0.1:1", port))
	if err != nil || !strings.Contains(out, "Valid configuration") {
		t.Fatalf("validate with Redis down: %v\n%s", err, out)
	}
	warned := false
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, `"level":"warn"`) && strings.Contains(l, "not reachable") && strings.Contains(l, fmt.Sprintf("redis://127.0.0.1:%d/0", port)) {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no warning names the unreachable Redis vault:\n%s", out)
	}

	// The running gateway said what it runs: one line for its vault and
	// one for its handler.
	logs, _ := os.ReadFile(g.LogFile)
	for _, want := range [][]string{
		{`"msg":"vault open"`, `"backend":"badger"`, `"dir":"` + vaultDir + `"`, `"max_bytes":536870912`, `"tenant_max_bytes":134217728`},
		{`"msg":"token_terminator handler ready"`, `"mode":"enforce"`, `"vault":"badger:` + vaultDir + `"`, `"recovery":"tool"`, `"context_compaction":true`, `"require_vault":false`},
	} {
		found := false
		for _, l := range bytes.Split(logs, []byte("\n")) {
			ok := true
			for _, w := range want {
				ok = ok && bytes.Contains(l, []byte(w))
			}
			found = found || ok
		}
		if !found {
			t.Errorf("no start-up line with %v in the log", want)
		}
	}
}

// listFiles describes every file under dir: name, size and modification
// time.
func listFiles(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s:%d:%s ", strings.TrimPrefix(p, dir), fi.Size(), fi.ModTime().Format(time.RFC3339Nano))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
