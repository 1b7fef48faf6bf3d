package badgervault

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// overwriteVlog writes b over dir's first value-log file at offset at,
// under a closed store.
func overwriteVlog(t *testing.T, dir string, at int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(globOne(t, filepath.Join(dir, "*.vlog")), os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	_, err = f.WriteAt(b, at)
	must(t, err)
}

// junk is n bytes of fixed pseudo-random junk: the same bytes every run,
// so what Badger makes of a log they overwrite is the same every run.
func junk(n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{'v', 'l', 'o', 'g'}).Read(b)
	return b
}

// sealVlog opens and closes the vault in dir, as a restart does: Badger
// starts a new value log at each open, and at open it reads through only
// the newest one, so damage to an older one is met only when a value is
// read, by the vault's own checks.
func sealVlog(t *testing.T, dir string) {
	t.Helper()
	s, err := Open(Config{Dir: dir})
	must(t, err)
	must(t, s.Close())
}

// junkOverSealedVlog overwrites 64 KiB of the sealed value log holding
// dir's artifacts, every entry of it, with junk.
func junkOverSealedVlog(t *testing.T, dir string) {
	t.Helper()
	sealVlog(t, dir)
	overwriteVlog(t, dir, vlogHeaderSize, junk(64<<10))
}

func digests(arts []artifact.Artifact) []artifact.Digest {
	out := make([]artifact.Digest, len(arts))
	for i, a := range arts {
		out[i] = a.Digest
	}
	return out
}

// A value whose stored bytes are damaged is never confirmed: it is reported
// missing, stored again and reads back, while undamaged values stay
// confirmed. Each damage is fixed (no random overwrite), so whether Badger
// opens the files is known: these it opens (one it refuses is in
// TestOpenDamaged).
func TestCorruptValueLogNeverConfirmed(t *testing.T) {
	tests := []struct {
		name    string
		damage  func(t *testing.T, dir string)
		corrupt int // artifacts whose value is damaged
	}{
		// Found by the vault's checks when the values are read.
		{"older log: junk over every entry", junkOverSealedVlog, 5},
		{"older log: one byte of the first value", func(t *testing.T, dir string) {
			sealVlog(t, dir)
			overwriteVlog(t, dir, vlogHeaderSize+2000, []byte{0xa5})
		}, 1},
		// Badger reads the newest log at open and cuts it at the first
		// entry that does not check, which loses every value after it.
		{"newest log: the first entry names an oversized key", func(t *testing.T, dir string) {
			overwriteVlog(t, dir, vlogHeaderSize+2, []byte{0xff, 0xff, 0x7f})
		}, 5},
		{"newest log: one byte of the first value", func(t *testing.T, dir string) {
			overwriteVlog(t, dir, vlogHeaderSize+2000, []byte{0xa5})
		}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, arts := filledVault(t) // 5 artifacts of 5 KB random content
			tt.damage(t, dir)
			s := openTest(t, Config{Dir: dir})
			ctx := context.Background()
			sc := artifact.Scope{Tenant: "t"}

			missing, err := s.Missing(ctx, sc, digests(arts))
			must(t, err)
			if len(missing) != tt.corrupt {
				t.Fatalf("Missing reported %d of %d artifacts, %d of them damaged", len(missing), len(arts), tt.corrupt)
			}
			st := s.Stats()
			if st.Corrupt != uint64(tt.corrupt) || st.Artifacts != int64(len(arts)-tt.corrupt) {
				t.Errorf("after dropping: %+v", st)
			}
			// What Missing confirmed reads back exactly.
			for _, a := range arts {
				if slices.Contains(missing, a.Digest) {
					continue
				}
				if got, ok, err := s.Get(ctx, "t", a.Digest); err != nil || !ok || got.Text != a.Text {
					t.Fatalf("confirmed artifact: Get = %v, %v", ok, err)
				}
			}
			// The compiler stores what Missing reports; it then reads back.
			must(t, s.Persist(ctx, sc, arts))
			for _, a := range arts {
				got, ok, err := s.Get(ctx, "t", a.Digest)
				if err != nil || !ok || got.Text != a.Text {
					t.Fatalf("Get after re-store = %v, %v", ok, err)
				}
			}
			if m, err := s.Missing(ctx, sc, digests(arts)); err != nil || len(m) != 0 {
				t.Fatalf("Missing after re-store = %d missing, %v", len(m), err)
			}
			if st := s.Stats(); st.Artifacts != int64(len(arts)) || st.Written != uint64(tt.corrupt) {
				t.Errorf("after re-store: %+v", st)
			}
		})
	}
}

// Persist, like Missing, never counts an unreadable record as present.
func TestCorruptValueLogPersistRewrites(t *testing.T) {
	dir, arts := filledVault(t)
	junkOverSealedVlog(t, dir)
	s := openTest(t, Config{Dir: dir})
	ctx := context.Background()
	if err := s.Persist(ctx, artifact.Scope{Tenant: "t"}, arts); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Written != uint64(len(arts)) || st.Verified != 0 || st.Corrupt != uint64(len(arts)) {
		t.Fatalf("Persist over corrupt records: %+v", st)
	}
	for _, a := range arts {
		if _, ok, err := s.Get(ctx, "t", a.Digest); err != nil || !ok {
			t.Fatalf("Get = %v, %v", ok, err)
		}
	}
}

// The background scrub finds corrupt records nobody asked for and drops
// them, with their bytes.
func TestScrubDropsCorrupt(t *testing.T) {
	dir, arts := filledVault(t)
	junkOverSealedVlog(t, dir)
	s := openTest(t, Config{Dir: dir, maintainEvery: 10 * time.Millisecond, scrubRate: 1 << 30})
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Corrupt < uint64(len(arts)) {
		if time.Now().After(deadline) {
			t.Fatalf("scrub did not drop the corrupt records: %+v", s.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := s.Stats(); st.Artifacts != 0 || st.Bytes-st.Lineage != 0 || st.Corrupt != uint64(len(arts)) {
		t.Errorf("after scrub: %+v", st)
	}
}

// A healthy vault: the scrub drops nothing, and Missing reads each record
// once per process, then answers from memory.
func TestScrubKeepsIntact(t *testing.T) {
	dir, arts := filledVault(t)
	s := openTest(t, Config{Dir: dir, maintainEvery: 5 * time.Millisecond, scrubRate: 1 << 30})
	time.Sleep(100 * time.Millisecond)
	ctx := context.Background()
	for range 2 {
		if m, err := s.Missing(ctx, artifact.Scope{Tenant: "t"}, digests(arts)); err != nil || len(m) != 0 {
			t.Fatalf("Missing = %d, %v", len(m), err)
		}
	}
	for _, a := range arts {
		if !s.checked.has("t", a.Digest) {
			t.Errorf("artifact %x not remembered as read intact", a.Digest[:4])
		}
	}
	if st := s.Stats(); st.Corrupt != 0 || st.Artifacts != int64(len(arts)) {
		t.Errorf("healthy vault after scrub: %+v", st)
	}
}

func TestVerifiedSetBounded(t *testing.T) {
	v := verifiedSet{max: 4}
	for i := range 10 {
		v.add("t", 0, seenDigest{d: dg(string(rune('a' + i)))})
		if len(v.m) > v.max {
			t.Fatalf("set grew to %d, max %d", len(v.m), v.max)
		}
	}
	if !v.has("t", dg("j")) || v.has("u", dg("j")) {
		t.Error("latest digest not kept, or kept for another tenant")
	}
}

// An artifact found stored is vouched for without a read only while its
// stored last-seen time is within touchAfter and no artifact deletion has
// committed since it was found (verifiedSet): a record deleted by any
// transaction run through deleting is reported missing on the next call,
// and a stale one is touched again.
func TestVouchedUntilDeletedOrStale(t *testing.T) {
	clk := newClock()
	s := openTest(t, Config{now: clk.Now})
	ctx := context.Background()
	sc := artifact.Scope{Tenant: "t"}
	a, b := mkArt(text("a", 9000)), mkArt(text("b", 9000))
	must(t, s.Persist(ctx, sc, []artifact.Artifact{a, b}))
	missing := func() []artifact.Digest {
		t.Helper()
		m, err := s.Missing(ctx, sc, []artifact.Digest{a.Digest, b.Digest})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := missing(); len(m) != 0 {
		t.Fatalf("Missing after Persist = %d", len(m))
	}

	// Deleted behind the set's back, through the deletion discipline: the
	// generation moves, so the next call reads the store and finds it gone.
	must(t, s.deleting(func() (bool, error) {
		return true, s.db.Update(func(txn *badger.Txn) error {
			_, err := dropRecord(txn, "t", a.Digest)
			return err
		})
	}))
	if m := missing(); len(m) != 1 || m[0] != a.Digest {
		t.Fatalf("Missing after a deletion = %x, want only a", m)
	}

	// Stale: past touchAfter the stored last-seen time is bumped again.
	m0, _ := readMeta(t, s, "t", b.Digest)
	clk.Add(s.touchAfter)
	missing()
	if m1, _ := readMeta(t, s, "t", b.Digest); m1.LastSeen == m0.LastSeen || m1.LastSeen != clk.Now().UnixNano() {
		t.Fatalf("last-seen %d -> %d past touchAfter, want %d", m0.LastSeen, m1.LastSeen, clk.Now().UnixNano())
	}
	// Record does not touch what was just touched, and touches the rest.
	clk.Add(s.touchAfter / 2)
	must(t, s.Record(ctx, sc, artifact.Record{ChainEnd: dg("c"), Length: 1, Referenced: []artifact.Digest{b.Digest}}))
	if m2, _ := readMeta(t, s, "t", b.Digest); m2.LastSeen != clk.Now().Add(-s.touchAfter/2).UnixNano() {
		t.Fatalf("Record touched a recently seen artifact: %d", m2.LastSeen)
	}
	clk.Add(s.touchAfter)
	must(t, s.Record(ctx, sc, artifact.Record{ChainEnd: dg("d"), Length: 1, Referenced: []artifact.Digest{b.Digest}}))
	if m3, _ := readMeta(t, s, "t", b.Digest); m3.LastSeen != clk.Now().UnixNano() {
		t.Fatalf("Record did not touch a stale artifact: %d, want %d", m3.LastSeen, clk.Now().UnixNano())
	}
	// What Record touched is vouched for again, without a read.
	bp := &b
	if rest := s.checked.unvouched("t", []*artifact.Artifact{bp}, clk.Now().UnixNano(), int64(s.touchAfter), s.deletionGen()); len(rest) != 0 {
		t.Fatal("an artifact Record just touched is not vouched for")
	}
}

// No request is vouched for while a deletion runs: a deletion that has
// committed but not yet moved the generation cannot leave a vouch behind.
func TestNoVouchDuringDeletion(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	sc := artifact.Scope{Tenant: "t"}
	a := mkArt(text("deleted while vouching", 9000))
	must(t, s.Persist(ctx, sc, []artifact.Artifact{a}))

	s.deletes.Lock() // a deletion in progress, as deleting runs it
	must(t, s.db.Update(func(txn *badger.Txn) error {
		_, err := dropRecord(txn, "t", a.Digest)
		return err
	}))
	got := make(chan []artifact.Digest, 1)
	go func() {
		m, err := s.Missing(ctx, sc, []artifact.Digest{a.Digest})
		if err != nil {
			t.Error(err)
		}
		got <- m
	}()
	select {
	case m := <-got:
		s.deletes.Unlock()
		t.Fatalf("Missing answered during a deletion: %x", m)
	case <-time.After(50 * time.Millisecond):
	}
	s.deleteGen++
	s.deletes.Unlock()
	if m := <-got; len(m) != 1 || m[0] != a.Digest {
		t.Fatalf("Missing after the deletion = %x, want the deleted artifact", m)
	}
}
