package integration

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

var update = flag.Bool("update", false, "rewrite the expected JSON of the golden Caddyfile adapt tests")

const goldenSep = "----------"

// TestCaddyfileAdapt adapts each testdata/caddyfile_adapt/*.caddyfiletest
// (Caddyfile, separator line, expected JSON or expected error substring),
// like Caddy's and caddy-l4's golden adapt tests. Run with -update to
// rewrite the JSON halves after an intended change.
func TestCaddyfileAdapt(t *testing.T) {
	files, err := filepath.Glob("testdata/caddyfile_adapt/*.caddyfiletest")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			caddyfileText, expected, ok := strings.Cut(string(data), goldenSep)
			if !ok {
				t.Fatalf("no %s separator", goldenSep)
			}
			caddyfileText = strings.TrimSpace(caddyfileText) + "\n"
			expected = strings.TrimSpace(expected)

			out, adaptErr := adaptCaddyfile(caddyfileText)
			isError := strings.HasPrefix(filepath.Base(file), "error_")
			if isError {
				if adaptErr == nil {
					t.Fatalf("expected an error containing %q, got none", expected)
				}
				if !strings.Contains(adaptErr.Error(), expected) {
					t.Fatalf("error %q does not contain %q", adaptErr, expected)
				}
				return
			}
			if adaptErr != nil {
				t.Fatalf("adapt: %v", adaptErr)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, out, "", "\t"); err != nil {
				t.Fatal(err)
			}
			got := pretty.String()
			if *update {
				if err := os.WriteFile(file, []byte(strings.TrimSpace(caddyfileText)+"\n"+goldenSep+"\n"+got+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != expected {
				t.Fatalf("adapted JSON differs from golden file (run with -update if intended)\n--- got:\n%s\n--- want:\n%s", got, expected)
			}
		})
	}
}

// The shipped example must adapt and validate (modules provisioned).
func TestCaddyfileExampleValidates(t *testing.T) {
	data, err := os.ReadFile("../../Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	out, err := adaptCaddyfile(string(data))
	if err != nil {
		t.Fatalf("adapt: %v", err)
	}
	var cfg caddy.Config
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Validate(&cfg); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if !bytes.Contains(out, []byte(`"handler":"token_terminator"`)) {
		t.Fatal("example has no token_terminator handler")
	}
}
