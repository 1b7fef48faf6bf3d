package badgervault

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// filledVault returns a closed vault directory holding five artifacts, with
// its content in a table (Close flushes the memtable) and the value log.
func filledVault(t *testing.T) (string, []artifact.Artifact) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "vault")
	s, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var arts []artifact.Artifact
	for i := range 5 {
		arts = append(arts, mkArt(randomText(fmt.Sprint("damage", i), 5000)))
	}
	if err := s.Persist(context.Background(), artifact.Scope{Tenant: "t"}, arts); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.sst")); len(m) == 0 {
		t.Fatal("setup: no table written")
	}
	return dir, arts
}

// snapshot maps every file of dir to the sha256 of its content.
func snapshot(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = sha256.Sum256(b)
	}
	return out
}

func globOne(t *testing.T, pattern string) string {
	t.Helper()
	m, _ := filepath.Glob(pattern)
	if len(m) == 0 {
		t.Fatalf("no file matches %s", pattern)
	}
	slices.Sort(m)
	return m[0]
}

func TestOpenDamaged(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, dir string)
		cause  string // in the error text
	}{
		{"MANIFEST overwritten", func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, "MANIFEST"), make([]byte, 64), 0o600))
		}, "bad magic"},
		{"MANIFEST truncated to its magic", func(t *testing.T, dir string) {
			must(t, os.Truncate(filepath.Join(dir, "MANIFEST"), 8))
		}, "names no tables"},
		{"MANIFEST truncated inside its magic", func(t *testing.T, dir string) {
			must(t, os.Truncate(filepath.Join(dir, "MANIFEST"), 3))
		}, "bad magic"},
		{"MANIFEST deleted", func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, "MANIFEST")))
		}, "MANIFEST missing"},
		{"tables deleted", func(t *testing.T, dir string) {
			must(t, os.Remove(globOne(t, filepath.Join(dir, "*.sst"))))
		}, "missing"},
		{"table truncated", func(t *testing.T, dir string) {
			must(t, os.Truncate(globOne(t, filepath.Join(dir, "*.sst")), 100))
		}, "table 1"},
		{"table zeroed", func(t *testing.T, dir string) {
			f := globOne(t, filepath.Join(dir, "*.sst"))
			fi, err := os.Stat(f)
			must(t, err)
			must(t, os.WriteFile(f, make([]byte, fi.Size()), 0o600))
		}, "table 1"},
		// Badger reads the newest value log through at open; a header
		// whose length does not decode stops it there.
		{"value-log entry header undecodable", func(t *testing.T, dir string) {
			overflow := append(bytes.Repeat([]byte{0xff}, 9), 0x02) // a varint past 64 bits
			overwriteVlog(t, dir, vlogHeaderSize+2, overflow)
		}, "varint overflows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, arts := filledVault(t)
			tt.damage(t, dir)
			before := snapshot(t, dir)
			s, err := Open(Config{Dir: dir})
			if err == nil {
				s.Close()
				t.Fatal("Open of a damaged vault succeeded")
			}
			t.Log(err)
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), tt.cause) {
				t.Fatalf("Open = %v, want ErrDamaged naming %q", err, tt.cause)
			}
			if after := snapshot(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("a failed Open changed the files:\nbefore %v\nafter  %v", before, after)
			}

			// Moved aside: a fresh vault starts, the damaged files are kept.
			clk := newClock()
			s, err = Open(Config{Dir: dir, MoveAsideDamaged: true, now: clk.Now})
			if err != nil {
				t.Fatalf("Open with MoveAsideDamaged = %v", err)
			}
			defer s.Close()
			if st := s.Stats(); st.Artifacts != 0 {
				t.Errorf("fresh vault has %d artifacts", st.Artifacts)
			}
			aside := dir + ".damaged-" + clk.Now().UTC().Format("20060102T150405.000000000Z")
			if got := snapshot(t, aside); fmt.Sprint(got) != fmt.Sprint(before) {
				t.Errorf("moved-aside directory differs from the damaged one")
			}
			fi, err := os.Stat(dir)
			if err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("fresh directory: %v, %v", fi, err)
			}
			// The fresh vault works.
			if err := s.Persist(context.Background(), artifact.Scope{Tenant: "t"}, arts[:1]); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Errors that are not damage never move a good database aside.
func TestOpenNotDamaged(t *testing.T) {
	dir, arts := filledVault(t)
	s, err := Open(Config{Dir: dir, MoveAsideDamaged: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Badger's directory lock: a second open fails, and is not damage.
	if s2, err := Open(Config{Dir: dir, MoveAsideDamaged: true}); err == nil || errors.Is(err, ErrDamaged) {
		if s2 != nil {
			s2.Close()
		}
		t.Fatalf("second Open = %v, want a non-damage error", err)
	}
	if m, _ := filepath.Glob(dir + ".damaged-*"); len(m) != 0 {
		t.Fatalf("a locked vault was moved aside: %v", m)
	}
	for _, a := range arts {
		if _, ok, err := s.Get(context.Background(), "t", a.Digest); !ok || err != nil {
			t.Fatalf("artifact lost after reopen: %v %v", ok, err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
