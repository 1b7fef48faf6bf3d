package badgervault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// With the disk reported (nearly) full every write is ErrFull, reads still
// work, and writes resume by themselves when space returns.
func TestDiskGuard(t *testing.T) {
	var free atomic.Int64
	free.Store(1 << 40)
	hook := func(string) (int64, bool, error) { return free.Load(), true, nil }
	dir := t.TempDir()
	s := openTest(t, Config{Dir: dir, freeSpace: hook, diskFresh: true})
	ctx := context.Background()
	sc := artifact.Scope{Tenant: "t"}
	old := mkArt(text("stored before", 20_000))
	must(t, s.Persist(ctx, sc, []artifact.Artifact{old}))

	reserve := s.disk.reserve()
	if reserve < 2*s.db.Opts().MemTableSize {
		t.Fatalf("reserve %d does not cover two memtable flushes", reserve)
	}
	free.Store(reserve + 10_000) // room for small transactions, not this artifact
	big := mkArt(text("new", 20_000))
	if err := s.Persist(ctx, sc, []artifact.Artifact{big}); !errors.Is(err, artifact.ErrFull) {
		t.Fatalf("Persist on a full disk = %v, want ErrFull", err)
	}
	ballast := filepath.Join(dir, ballastFile)
	if fi, err := os.Stat(ballast); err != nil || fi.Size() != s.disk.fixed {
		t.Fatalf("ballast: %v, %v", fi, err)
	}
	free.Store(reserve - 1)
	for name, err := range map[string]error{
		"Persist": s.Persist(ctx, sc, []artifact.Artifact{big}),
		"Record":  s.Record(ctx, sc, artifact.Record{ChainEnd: dg("c"), Length: 1}),
		// A digest this process has not found stored needs a transaction.
		"Missing": func() error { _, err := s.Missing(ctx, sc, []artifact.Digest{big.Digest}); return err }(),
	} {
		if !errors.Is(err, artifact.ErrFull) {
			t.Errorf("%s on a full disk = %v, want ErrFull", name, err)
		}
	}
	// An artifact found stored moments ago is vouched for without a
	// transaction (verifiedSet): nothing is written, so a full disk does
	// not stop its receipts.
	if m, err := s.Missing(ctx, sc, []artifact.Digest{old.Digest}); err != nil || len(m) != 0 {
		t.Errorf("Missing of a vouched artifact on a full disk = %v, %v", m, err)
	}
	if got, ok, err := s.Get(ctx, "t", old.Digest); err != nil || !ok || got.Text != old.Text {
		t.Errorf("Get on a full disk = %v, %v", ok, err)
	}
	if _, err := os.Stat(ballast); err == nil {
		t.Error("ballast kept with less than the memtable reserve free")
	}
	if st := s.Stats(); st.Artifacts != 1 {
		t.Errorf("a refused write stored something: %+v", st)
	}
	free.Store(1 << 40)
	must(t, s.Persist(ctx, sc, []artifact.Artifact{big}))
	must(t, s.Close())

	// Opening on a full disk is an error, not a crash.
	free.Store(1 << 20)
	if s2, err := Open(Config{Dir: dir, freeSpace: hook}); !errors.Is(err, artifact.ErrFull) {
		if s2 != nil {
			s2.Close()
		}
		t.Fatalf("Open on a full disk = %v, want ErrFull", err)
	}
	free.Store(1 << 40)
	s3 := openTest(t, Config{Dir: dir, freeSpace: hook})
	if _, ok, _ := s3.Get(ctx, "t", big.Digest); !ok {
		t.Error("artifact lost across the full-disk open")
	}
}

// The real thing: a small file system filled by the vault, then by someone
// else, with a close and a restart on the full disk, on a tmpfs and on an
// ext4 loop device. Badger writes through memory maps, so without the guard
// the child dies of SIGBUS; the child process keeps such a crash from
// killing this test binary and makes it a failure instead.
const diskFullEnv = "TT_VAULT_DISKFULL_PHASE"

func TestDiskFull(t *testing.T) {
	if phase := os.Getenv(diskFullEnv); phase != "" {
		diskFullChild(t, phase, os.Getenv("TT_VAULT_DISKFULL_DIR"))
		return
	}
	if testing.Short() {
		t.Skip("mounts small file systems and runs child processes")
	}
	mounts := []struct {
		name  string
		mount func(t *testing.T, mnt string) ([]byte, error)
	}{
		{"tmpfs", func(t *testing.T, mnt string) ([]byte, error) {
			return exec.Command("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", mnt).CombinedOutput()
		}},
		{"ext4 loop", func(t *testing.T, mnt string) ([]byte, error) {
			img := filepath.Join(t.TempDir(), "fs.img")
			if err := os.WriteFile(img, nil, 0o600); err != nil {
				return nil, err
			}
			if err := os.Truncate(img, 64<<20); err != nil {
				return nil, err
			}
			if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
				return out, err
			}
			return exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput()
		}},
	}
	for _, m := range mounts {
		t.Run(m.name, func(t *testing.T) {
			mnt := t.TempDir()
			if out, err := m.mount(t, mnt); err != nil {
				t.Skipf("cannot mount %s here (needs root and mount rights): %v: %s", m.name, err, bytes.TrimSpace(out))
			}
			t.Cleanup(func() {
				if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
					t.Errorf("umount %s: %v: %s", mnt, err, out)
				}
			})
			diskFullScenario(t, mnt)
		})
	}
}

func diskFullScenario(t *testing.T, mnt string) {
	dir := filepath.Join(mnt, "vault")
	run := func(phase string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDiskFull$", "-test.v")
		cmd.Env = append(os.Environ(), diskFullEnv+"="+phase, "TT_VAULT_DISKFULL_DIR="+dir)
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("PASS")) {
			msg := string(out)
			if i := strings.Index(msg, "fatal error"); i >= 0 {
				msg = msg[i:min(len(msg), i+600)]
			} else if len(msg) > 3000 {
				msg = msg[len(msg)-3000:]
			}
			t.Fatalf("child %q: %v\n%s", phase, err, msg)
		}
		return string(out)
	}
	// A ballast file another program holds, released later.
	must(t, os.WriteFile(filepath.Join(mnt, "ballast"), bytes.Repeat([]byte{1}, 8<<20), 0o600))
	t.Log(lastLine(run("fill")))
	// Someone else fills the disk to the last block while the vault has
	// writes in its memtable, and the vault closes (a reload, a shutdown).
	t.Log(lastLine(run("close-full")))
	// It restarts on the still-full disk, then after space returns.
	t.Log(lastLine(run("reopen-full")))
	must(t, os.Remove(filepath.Join(mnt, "filler")))
	must(t, os.Remove(filepath.Join(mnt, "filler2")))
	t.Log(lastLine(run("reopen")))
}

func lastLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "child:") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// fillDisk writes path until the file system has no block left.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	must(t, err)
	defer f.Close()
	chunk := bytes.Repeat([]byte{2}, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	for n := 4096; n > 0; n /= 2 { // the last partial megabyte
		for {
			if _, err := f.Write(chunk[:n]); err != nil {
				break
			}
		}
	}
}

func diskFullArt(i int) artifact.Artifact {
	return mkArt(randomText(fmt.Sprint("diskfull", i), 256<<10))
}

func diskFullChild(t *testing.T, phase, dir string) {
	ctx := context.Background()
	sc := artifact.Scope{Tenant: "t"}
	cfg := Config{Dir: dir, MaxBytes: 1 << 30, TenantMaxBytes: 1 << 30}
	switch phase {
	case "fill":
		s, err := Open(cfg)
		must(t, err)
		fillUntilFull := func(from int) int {
			for i := from; ; i += 4 {
				arts := []artifact.Artifact{diskFullArt(i), diskFullArt(i + 1), diskFullArt(i + 2), diskFullArt(i + 3)}
				if err := s.Persist(ctx, sc, arts); err != nil {
					if !errors.Is(err, artifact.ErrFull) {
						t.Fatalf("Persist on a filling disk = %v, want ErrFull", err)
					}
					return i
				}
				if i > 1000 {
					t.Fatal("the disk never filled")
				}
			}
		}
		n := fillUntilFull(0)
		if n == 0 {
			t.Fatal("nothing fit on an empty 64 MiB disk")
		}
		// Space returns: the same store resumes.
		must(t, os.Remove(filepath.Join(filepath.Dir(dir), "ballast")))
		m := fillUntilFull(n)
		if m == n {
			t.Fatal("no write resumed after space returned")
		}
		for _, i := range []int{0, m - 1} {
			if _, ok, err := s.Get(ctx, "t", diskFullArt(i).Digest); err != nil || !ok {
				t.Fatalf("artifact %d: %v, %v", i, ok, err)
			}
		}
		must(t, s.Close())
		fmt.Printf("child: %d artifacts of 256 KiB stored before ErrFull, %d after space returned\n", n, m)
		writeCount(t, dir, m)
	case "close-full":
		s, err := Open(cfg)
		must(t, err)
		ballast := filepath.Join(dir, ballastFile)
		if _, err := os.Stat(ballast); err != nil {
			t.Fatalf("no ballast: %v", err)
		}
		for i := range 20 { // small writes the reserve admits, left in the memtable
			rec := artifact.Record{ChainEnd: dg(fmt.Sprint("close-full", i)), Length: 1}
			must(t, s.Record(ctx, sc, rec))
		}
		fillDisk(t, filepath.Join(filepath.Dir(dir), "filler"))
		// A free-space measure is reused for at most recheckAfter.
		time.Sleep(recheckAfter)
		if err := s.Record(ctx, sc, artifact.Record{ChainEnd: dg("refused"), Length: 1}); !errors.Is(err, artifact.ErrFull) {
			t.Fatalf("Record on a full disk = %v, want ErrFull", err)
		}
		must(t, s.Close())
		if _, err := os.Stat(ballast); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("ballast kept on a full disk: %v", err)
		}
		fmt.Println("child: closed with a memtable to flush on a full disk")
	case "reopen-full":
		// Closing gave the ballast back; the other program takes that too.
		fillDisk(t, filepath.Join(filepath.Dir(dir), "filler2"))
		s, err := Open(cfg)
		if err == nil {
			s.Close()
			t.Fatal("Open on a full disk succeeded")
		}
		if !errors.Is(err, artifact.ErrFull) {
			t.Fatalf("Open on a full disk = %v, want ErrFull", err)
		}
		fmt.Printf("child: open on a full disk: %v\n", err)
	case "reopen":
		s, err := Open(cfg)
		must(t, err)
		defer s.Close()
		m := readCount(t, dir)
		for i := range m {
			if _, ok, err := s.Get(ctx, "t", diskFullArt(i).Digest); err != nil || !ok {
				t.Fatalf("artifact %d after restart: %v, %v", i, ok, err)
			}
		}
		if st := s.Stats(); st.Artifacts != int64(m) {
			t.Fatalf("after restart %d artifacts, want %d", st.Artifacts, m)
		}
		chain := []artifact.Digest{dg(fmt.Sprint("close-full", 19)), dg("next")}
		if lin, err := s.Ancestor(ctx, sc, chain); err != nil || !lin.Found {
			t.Fatalf("lineage written before the full-disk close: %v, %v", lin.Found, err)
		}
		if _, err := os.Stat(filepath.Join(dir, ballastFile)); err != nil {
			t.Fatalf("ballast not allocated again once space returned: %v", err)
		}
		fmt.Printf("child: all %d artifacts read back after the restart\n", m)
	default:
		t.Fatalf("unknown phase %q", phase)
	}
}

func writeCount(t *testing.T, dir string, n int) {
	must(t, os.WriteFile(dir+".count", []byte(fmt.Sprint(n)), 0o600))
}

func readCount(t *testing.T, dir string) int {
	b, err := os.ReadFile(dir + ".count")
	must(t, err)
	var n int
	_, err = fmt.Sscan(string(b), &n)
	must(t, err)
	return n
}

func TestNoSpaceIsFull(t *testing.T) {
	tests := []struct {
		err  error
		full bool
	}{
		{nil, false},
		{errors.New("conflict"), false},
		{fmt.Errorf("write MANIFEST: %w", syscall.ENOSPC), true},
		{fmt.Errorf("while writing: %v", syscall.ENOSPC), true}, // Badger's %v
		{fmt.Errorf("%w: already", vault.ErrFull), true},
	}
	for _, tt := range tests {
		got := noSpaceIsFull(tt.err)
		if errors.Is(got, vault.ErrFull) != tt.full || (tt.err == nil) != (got == nil) {
			t.Errorf("noSpaceIsFull(%v) = %v, want full %v", tt.err, got, tt.full)
		}
	}
}
