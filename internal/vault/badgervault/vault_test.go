package badgervault

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dgraph-io/badger/v4"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func openTest(t testing.TB, cfg Config) *Store {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mkArt(text string) artifact.Artifact {
	raw, _ := json.Marshal(text)
	return artifact.Artifact{
		Digest: artifact.DigestOf(text, raw),
		Text:   text,
		Raw:    raw,
		Tool:   "read_file",
		Args:   `{"path":"/etc/hosts"}`,
		Chars:  utf8.RuneCountInString(text),
	}
}

// text returns n bytes of content unique to seed.
func text(seed string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s line %d: the quick brown fox\n", seed, i)
	}
	return b.String()[:n]
}

func dg(s string) artifact.Digest { return sha256.Sum256([]byte(s)) }

func readMeta(t *testing.T, s *Store, tenant string, d artifact.Digest) (vault.Meta, bool) {
	t.Helper()
	var m vault.Meta
	found := false
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(vault.MetaKey(tenant, d))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		return item.Value(m.Decode)
	})
	if err != nil {
		t.Fatal(err)
	}
	return m, found
}

func TestPersistGet(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	sc := artifact.Scope{Tenant: s.Tenant("sk-test")}
	arts := []artifact.Artifact{
		mkArt("small"),
		mkArt(text("big", 100_000)),
		mkArt("unicode: héllo wörld ✓ 😀 \u2028 \"quoted\" \\ back\tslash\n"),
		mkArt(strings.Repeat("x", 1023)),
		{Digest: artifact.DigestOf("", []byte(`""`)), Text: "", Raw: []byte(`""`)}, // empty text, no provenance
	}
	// A non-canonical escape is a spelling of its own, kept byte for byte.
	esc := mkArt("é")
	esc.Raw = []byte(`"\u00e9"`)
	esc.Digest = artifact.DigestOf(esc.Text, esc.Raw)
	arts = append(arts, esc)

	if err := s.Persist(ctx, sc, arts); err != nil {
		t.Fatal(err)
	}
	var bytes int64
	for _, want := range arts {
		got, ok, err := s.Get(ctx, sc.Tenant, want.Digest)
		if err != nil || !ok {
			t.Fatalf("Get(%x) = %v, %v", want.Digest[:4], ok, err)
		}
		if got.Text != want.Text || string(got.Raw) != string(want.Raw) || got.Tool != want.Tool ||
			got.Args != want.Args || got.Chars != want.Chars || got.Digest != want.Digest {
			t.Errorf("Get(%x) = %+v, want %+v", want.Digest[:4], got, want)
		}
		bytes += vault.ArtifactSize(&want)
	}
	if _, ok, err := s.Get(ctx, sc.Tenant, dg("absent")); ok || err != nil {
		t.Errorf("Get(absent) = %v, %v", ok, err)
	}
	st := s.Stats()
	if st.Artifacts != int64(len(arts)) || st.Bytes != bytes || st.Written != uint64(len(arts)) {
		t.Errorf("Stats = %+v, want %d artifacts, %d bytes", st, len(arts), bytes)
	}
}

func TestPersistExisting(t *testing.T) {
	clk := newClock()
	s := openTest(t, Config{now: clk.Now})
	ctx := context.Background()
	sc := artifact.Scope{Tenant: "t"}
	a := mkArt(text("a", 5000))
	dup := []artifact.Artifact{a, a, a}
	if err := s.Persist(ctx, sc, dup); err != nil {
		t.Fatal(err)
	}
	m0, _ := readMeta(t, s, "t", a.Digest)
	if st := s.Stats(); st.Written != 1 || st.Artifacts != 1 || st.Bytes != vault.ArtifactSize(&a) {
		t.Fatalf("after first Persist: %+v", st)
	}

	// Within touchAfter: verified only, no write at all.
	clk.Add(30 * time.Second)
	if err := s.Persist(ctx, sc, []artifact.Artifact{a}); err != nil {
		t.Fatal(err)
	}
	m1, _ := readMeta(t, s, "t", a.Digest)
	if m1 != m0 {
		t.Errorf("meta changed within touchAfter: %+v -> %+v", m0, m1)
	}
	// Later: last-seen is bumped, content and created time are not rewritten.
	clk.Add(2 * time.Minute)
	changed := a
	changed.Tool, changed.Args = "other", "{}"
	if err := s.Persist(ctx, sc, []artifact.Artifact{changed}); err != nil {
		t.Fatal(err)
	}
	m2, _ := readMeta(t, s, "t", a.Digest)
	if m2.LastSeen != clk.Now().UnixNano() || m2.Created != m0.Created {
		t.Errorf("meta after bump = %+v, want last seen %d, created %d", m2, clk.Now().UnixNano(), m0.Created)
	}
	got, _, _ := s.Get(ctx, "t", a.Digest)
	if got.Tool != a.Tool || got.Args != a.Args {
		t.Errorf("existing artifact was rewritten: tool %q", got.Tool)
	}
	if st := s.Stats(); st.Written != 1 || st.Verified != 2 || st.Artifacts != 1 {
		t.Errorf("Stats = %+v", st)
	}
}

func TestPersistRejects(t *testing.T) {
	good := mkArt("good")
	wrong := mkArt("wrong")
	wrong.Digest = dg("something else")
	huge := mkArt(strings.Repeat("h", 600))
	tests := []struct {
		name string
		arts []artifact.Artifact
		want error
	}{
		{"wrong digest", []artifact.Artifact{good, wrong}, vault.ErrDigest},
		{"zero digest", []artifact.Artifact{{Text: "x"}}, vault.ErrDigest},
		{"over per-artifact cap", []artifact.Artifact{good, huge}, vault.ErrTooLarge},
		{"more than the whole vault", []artifact.Artifact{good, mkArt(strings.Repeat("h", 400))}, vault.ErrFull},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openTest(t, Config{MaxArtifactBytes: 1000, MaxBytes: 500})
			err := s.Persist(context.Background(), artifact.Scope{Tenant: "t"}, tt.arts)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Persist = %v, want %v", err, tt.want)
			}
			// A rejected request stores nothing, not even its valid artifacts.
			if st := s.Stats(); st.Artifacts != 0 || st.Bytes != 0 {
				t.Errorf("Stats after rejection = %+v", st)
			}
			if _, ok, _ := s.Get(context.Background(), "t", good.Digest); ok {
				t.Error("valid artifact of a rejected batch was stored")
			}
		})
	}
}

func TestEviction(t *testing.T) {
	clk := newClock()
	const retention = time.Hour
	arts := make([]artifact.Artifact, 7)
	for i := range arts {
		arts[i] = mkArt(text(fmt.Sprint("art", i), 1500))
	}
	size := vault.ArtifactSize(&arts[0])
	// One tenant: this is about the cap, so its quota is the whole vault.
	s := openTest(t, Config{MaxBytes: 3*size + size/2, TenantMaxBytes: 3*size + size/2, Retention: retention, now: clk.Now})
	ctx := context.Background()
	sc := artifact.Scope{Tenant: "t"}
	persist := func(i int) error { return s.Persist(ctx, sc, arts[i:i+1]) }
	present := func() (out []int) {
		for i, a := range arts {
			if _, ok, _ := s.Get(ctx, "t", a.Digest); ok {
				out = append(out, i)
			}
		}
		return out
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	must(persist(0)) // t0
	clk.Add(time.Minute)
	must(persist(1)) // t0+1m
	clk.Add(time.Minute)
	must(persist(2)) // t0+2m
	clk.Add(2 * time.Hour)
	must(persist(0)) // seen again: 0 is now the most recent

	// Full: the least recently seen expired artifact (1) goes, and only it.
	must(persist(3))
	if got := fmt.Sprint(present()); got != "[0 2 3]" {
		t.Fatalf("after first eviction present = %s, want [0 2 3]", got)
	}
	// Next: 2 is the only one out of its window.
	must(persist(4))
	if got := fmt.Sprint(present()); got != "[0 3 4]" {
		t.Fatalf("after second eviction present = %s, want [0 3 4]", got)
	}
	clk.Add(2 * time.Minute)
	must(persist(4)) // seen again: 0 is now the least recently seen

	// Everything left was seen within Retention: full, and nothing evicted.
	clk.Add(retention - 2*time.Minute)
	err := persist(5)
	if !errors.Is(err, vault.ErrFull) {
		t.Fatalf("Persist into live-full vault = %v, want ErrFull", err)
	}
	if got := fmt.Sprint(present()); got != "[0 3 4]" {
		t.Fatalf("after ErrFull present = %s, want [0 3 4]", got)
	}
	if err := persist(5); !errors.Is(err, vault.ErrFull) {
		t.Fatalf("second Persist = %v, want ErrFull", err)
	}
	// Verifying an artifact already stored never needs room.
	must(persist(3))
	// Once 0 leaves its window it goes; 4 (seen 2 minutes after 0) stays.
	clk.Add(time.Minute)
	must(persist(5))
	if got := fmt.Sprint(present()); got != "[3 4 5]" {
		t.Fatalf("after window passed present = %s, want [3 4 5]", got)
	}
	st := s.Stats()
	if st.Evicted != 3 || st.Artifacts != 3 || st.Bytes != 3*size {
		t.Errorf("Stats = %+v", st)
	}
	if st.Bytes > st.MaxBytes {
		t.Errorf("over cap: %+v", st)
	}
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	tenant := s.Tenant("Bearer sk-abc")
	sc := artifact.Scope{Tenant: tenant, Session: "s1"}
	a := mkArt(text("persisted", 20_000))
	chain := []artifact.Digest{dg("m1"), dg("m2"), dg("m3")}
	exp := map[artifact.Digest]int{a.Digest: 2}
	if err := s.Persist(ctx, sc, []artifact.Artifact{a}); err != nil {
		t.Fatal(err)
	}
	if err := s.Record(ctx, sc, artifact.Record{ChainEnd: chain[1], Length: 2, Parent: chain[0], HasParent: true, Exposures: exp}); err != nil {
		t.Fatal(err)
	}
	before := s.Stats()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openTest(t, Config{Dir: dir})
	if got := s.Tenant("Bearer sk-abc"); got != tenant {
		t.Errorf("Tenant after reopen = %s, want %s", got, tenant)
	}
	got, ok, err := s.Get(ctx, tenant, a.Digest)
	if err != nil || !ok || got.Text != a.Text || string(got.Raw) != string(a.Raw) {
		t.Errorf("Get after reopen = %v, %v", ok, err)
	}
	lin, err := s.Ancestor(ctx, sc, chain)
	if err != nil || !lin.Found || lin.Ancestor != chain[1] || lin.Length != 2 || !maps.Equal(lin.Exposures, exp) {
		t.Errorf("Ancestor after reopen = %+v, %v", lin, err)
	}
	if st := s.Stats(); st.Artifacts != before.Artifacts || st.Bytes != before.Bytes {
		t.Errorf("Stats after reopen = %+v, before %+v", st, before)
	}
}

func TestTenant(t *testing.T) {
	s1 := openTest(t, Config{})
	s2 := openTest(t, Config{})
	a, b := s1.Tenant("Bearer sk-a"), s1.Tenant("Bearer sk-b")
	if len(a) != 32 || strings.Trim(a, "0123456789abcdef") != "" {
		t.Errorf("Tenant = %q, want 32 hex chars", a)
	}
	if a == b || a != s1.Tenant("Bearer sk-a") {
		t.Error("Tenant not deterministic or not distinct")
	}
	if s2.Tenant("Bearer sk-a") == a {
		t.Error("two vaults share a tenant key")
	}
	if got := s1.Tenant(""); got != "anonymous" {
		t.Errorf(`Tenant("") = %q`, got)
	}
	if strings.Contains(a, hex.EncodeToString([]byte("sk-a"))) {
		t.Error("tenant leaks the credential")
	}
}

func TestTenantIsolation(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	A := artifact.Scope{Tenant: s.Tenant("key-a")}
	B := artifact.Scope{Tenant: s.Tenant("key-b")}
	art := mkArt(text("secret", 9000))
	if err := s.Persist(ctx, A, []artifact.Artifact{art}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Get(ctx, B.Tenant, art.Digest); ok {
		t.Fatal("tenant B can read tenant A's artifact")
	}
	// B's Persist must not be satisfied by A's copy: B gets its own.
	if err := s.Persist(ctx, B, []artifact.Artifact{art}); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Written != 2 || st.Verified != 0 || st.Artifacts != 2 {
		t.Errorf("Stats = %+v, want two independent writes", st)
	}

	chain := []artifact.Digest{dg("1"), dg("2"), dg("3")}
	if err := s.Record(ctx, A, artifact.Record{ChainEnd: chain[1], Length: 2}); err != nil {
		t.Fatal(err)
	}
	if lin, _ := s.Ancestor(ctx, A, chain); !lin.Found {
		t.Error("tenant A does not see its own lineage")
	}
	if lin, _ := s.Ancestor(ctx, B, chain); lin.Found {
		t.Error("tenant B sees tenant A's lineage")
	}
}

func TestLineage(t *testing.T) {
	chain := make([]artifact.Digest, 10)
	for i := range chain {
		chain[i] = dg(fmt.Sprint("msg", i))
	}
	x, y := dg("artifact x"), dg("artifact y")
	base := artifact.Scope{Tenant: "t"}
	sess := artifact.Scope{Tenant: "t", Session: "s"}
	type rec struct {
		scope artifact.Scope
		at    int // index in chain of the recorded chain end
		exp   map[artifact.Digest]int
	}
	tests := []struct {
		name    string
		records []rec
		scope   artifact.Scope
		chain   []artifact.Digest
		want    int // index of the expected ancestor, -1 for none
		wantExp map[artifact.Digest]int
	}{
		{"empty vault", nil, base, chain, -1, nil},
		{"empty chain", []rec{{base, 0, nil}}, base, nil, -1, nil},
		{"single message", []rec{{base, 0, nil}}, base, chain[:1], -1, nil},
		{"full chain never returned", []rec{{base, 9, nil}}, base, chain, -1, nil},
		{"retry sees same ancestry", []rec{{base, 4, nil}, {base, 9, nil}}, base, chain, 4, nil},
		{"first message", []rec{{base, 0, map[artifact.Digest]int{x: 1}}}, base, chain, 0, map[artifact.Digest]int{x: 1}},
		{"longest prefix wins", []rec{{base, 2, map[artifact.Digest]int{x: 1}}, {base, 6, map[artifact.Digest]int{x: 1, y: 2}}, {base, 3, nil}}, base, chain, 6, map[artifact.Digest]int{x: 1, y: 2}},
		{"prefix of shorter chain", []rec{{base, 2, nil}, {base, 6, nil}}, base, chain[:6], 2, nil},
		{"other session invisible", []rec{{base, 5, nil}}, sess, chain, -1, nil},
		{"session sees its own", []rec{{base, 7, nil}, {sess, 3, nil}}, sess, chain, 3, nil},
		{"no session does not see session", []rec{{sess, 7, nil}, {base, 1, nil}}, base, chain, 1, nil},
		{"other tenant invisible", []rec{{artifact.Scope{Tenant: "u"}, 5, nil}}, base, chain, -1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openTest(t, Config{})
			ctx := context.Background()
			for _, r := range tt.records {
				// Recording twice is harmless.
				for range 2 {
					if err := s.Record(ctx, r.scope, artifact.Record{ChainEnd: chain[r.at], Length: r.at + 1, Exposures: r.exp}); err != nil {
						t.Fatal(err)
					}
				}
			}
			lin, err := s.Ancestor(ctx, tt.scope, tt.chain)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want < 0 {
				if lin.Found || len(lin.Exposures) != 0 {
					t.Errorf("Ancestor = %+v, want none", lin)
				}
				return
			}
			if !lin.Found || lin.Ancestor != chain[tt.want] || lin.Length != tt.want+1 {
				t.Errorf("Ancestor = found %v, length %d, want length %d", lin.Found, lin.Length, tt.want+1)
			}
			if len(tt.wantExp) > 0 || len(lin.Exposures) > 0 {
				if !maps.Equal(lin.Exposures, tt.wantExp) {
					t.Errorf("Exposures = %v, want %v", lin.Exposures, tt.wantExp)
				}
			}
		})
	}
}

func TestRecordKeepsReferencedAlive(t *testing.T) {
	clk := newClock()
	s := openTest(t, Config{Retention: time.Hour, now: clk.Now})
	ctx := context.Background()
	sc := artifact.Scope{Tenant: "t"}
	a := mkArt("referenced")
	if err := s.Persist(ctx, sc, []artifact.Artifact{a}); err != nil {
		t.Fatal(err)
	}
	clk.Add(50 * time.Minute)
	rec := artifact.Record{ChainEnd: dg("c"), Length: 1, Referenced: []artifact.Digest{a.Digest, dg("gone")}}
	if err := s.Record(ctx, sc, rec); err != nil {
		t.Fatal(err)
	}
	if m, _ := readMeta(t, s, "t", a.Digest); m.LastSeen != clk.Now().UnixNano() {
		t.Errorf("last seen not bumped by Record: %d", m.LastSeen)
	}
}

func TestLineageExpires(t *testing.T) {
	t.Parallel()
	s := openTest(t, Config{Retention: time.Second})
	ctx := context.Background()
	chain := []artifact.Digest{dg("a"), dg("b")}
	if err := s.Record(ctx, artifact.Scope{}, artifact.Record{ChainEnd: chain[0], Length: 1}); err != nil {
		t.Fatal(err)
	}
	if lin, _ := s.Ancestor(ctx, artifact.Scope{}, chain); !lin.Found {
		t.Fatal("fresh record not found")
	}
	if st := s.Stats(); st.Lineage == 0 || st.Bytes != st.Lineage {
		t.Fatalf("fresh record not counted: %+v", st)
	}
	time.Sleep(2100 * time.Millisecond) // Badger TTLs have one-second resolution
	if lin, _ := s.Ancestor(ctx, artifact.Scope{}, chain); lin.Found {
		t.Error("record outlived its TTL")
	}
	// Its bytes leave the capacity with it, at the next maintenance pass.
	s.recountLineage()
	if st := s.Stats(); st.Lineage != 0 || st.Bytes != 0 {
		t.Errorf("expired lineage still counted: %+v", st)
	}
}

func TestDirMode(t *testing.T) {
	root := t.TempDir()
	tests := []struct {
		name  string
		setup func(dir string) error
	}{
		{"created", func(string) error { return nil }},
		{"nested", func(string) error { return nil }},
		{"existing 0755", func(dir string) error { return os.Mkdir(dir, 0o755) }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(root, fmt.Sprint(i))
			if tt.name == "nested" {
				dir = filepath.Join(dir, "a", "b")
			}
			if err := tt.setup(dir); err != nil {
				t.Fatal(err)
			}
			openTest(t, Config{Dir: dir})
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if perm := fi.Mode().Perm(); perm != 0o700 {
				t.Errorf("mode = %o, want 700", perm)
			}
		})
	}
	if _, err := Open(Config{}); err == nil {
		t.Error("Open without a directory succeeded")
	}
}

func TestConcurrent(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	shared := []artifact.Artifact{mkArt(text("shared1", 20_000)), mkArt(text("shared2", 3000))}
	const workers, rounds = 16, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := artifact.Scope{Tenant: fmt.Sprint("tenant", w%4)}
			chain := []artifact.Digest{dg(fmt.Sprint(w, "root"))}
			for r := range rounds {
				own := mkArt(text(fmt.Sprint("own", w, "-", r), 10_000))
				if err := s.Persist(ctx, sc, append([]artifact.Artifact{own}, shared...)); err != nil {
					errs <- err
					return
				}
				chain = append(chain, dg(fmt.Sprint(w, r)))
				lin, err := s.Ancestor(ctx, sc, chain)
				if err != nil {
					errs <- err
					return
				}
				if r > 0 && (!lin.Found || lin.Length != len(chain)-1) {
					errs <- fmt.Errorf("worker %d round %d: ancestor %+v", w, r, lin)
					return
				}
				exp := maps.Clone(lin.Exposures)
				if exp == nil {
					exp = map[artifact.Digest]int{}
				}
				exp[own.Digest]++
				rec := artifact.Record{ChainEnd: chain[len(chain)-1], Length: len(chain), Exposures: exp, Referenced: []artifact.Digest{shared[0].Digest}}
				if err := s.Record(ctx, sc, rec); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Racing writers of the same artifact must not double count it.
	wantN := int64(workers*rounds + 4*len(shared))
	wantB := int64(workers*rounds)*10_000 + 4*(vault.ArtifactSize(&shared[0])+vault.ArtifactSize(&shared[1]))
	var rawExtra int64
	for w := range workers {
		for r := range rounds {
			a := mkArt(text(fmt.Sprint("own", w, "-", r), 10_000))
			rawExtra += int64(len(a.Raw))
		}
	}
	wantB += rawExtra
	if st := s.Stats(); st.Artifacts != wantN || st.Bytes-st.Lineage != wantB {
		t.Errorf("Stats = %d artifacts %d bytes, want %d, %d", st.Artifacts, st.Bytes, wantN, wantB)
	}
	// And the in-memory totals agree with a fresh scan.
	n, b := s.count.Load(), s.bytes.Load()
	if err := s.scanSizes(); err != nil {
		t.Fatal(err)
	}
	if s.count.Load() != n || s.bytes.Load() != b {
		t.Errorf("rescan = %d, %d; counters were %d, %d", s.count.Load(), s.bytes.Load(), n, b)
	}
}

func TestContextCanceled(t *testing.T) {
	s := openTest(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sc := artifact.Scope{Tenant: "t"}
	if err := s.Persist(ctx, sc, []artifact.Artifact{mkArt("x")}); !errors.Is(err, context.Canceled) {
		t.Errorf("Persist = %v", err)
	}
	if err := s.Record(ctx, sc, artifact.Record{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Record = %v", err)
	}
	if _, err := s.Ancestor(ctx, sc, []artifact.Digest{dg("a"), dg("b")}); !errors.Is(err, context.Canceled) {
		t.Errorf("Ancestor = %v", err)
	}
	if st := s.Stats(); st.Artifacts != 0 {
		t.Errorf("canceled Persist stored something: %+v", st)
	}
}

func TestMaintenance(t *testing.T) {
	clk := newClock()
	a, b := mkArt(text("old", 4000)), mkArt(text("new", 4000))
	s := openTest(t, Config{MaxBytes: 2 * vault.ArtifactSize(&a), TenantMaxBytes: 2 * vault.ArtifactSize(&a), Retention: time.Hour, now: clk.Now, maintainEvery: 10 * time.Millisecond})
	ctx := context.Background()
	sc := artifact.Scope{Tenant: "t"}
	if err := s.Persist(ctx, sc, []artifact.Artifact{a}); err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * time.Hour)
	if err := s.Persist(ctx, sc, []artifact.Artifact{b}); err != nil {
		t.Fatal(err)
	}
	// Above 90% of the cap: the background pass evicts the expired one only.
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Evicted == 0 {
		if time.Now().After(deadline) {
			t.Fatal("background eviction did not run")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, ok, _ := s.Get(ctx, "t", a.Digest); ok {
		t.Error("expired artifact survived")
	}
	if _, ok, _ := s.Get(ctx, "t", b.Digest); !ok {
		t.Error("live artifact evicted")
	}
}

func TestClose(t *testing.T) {
	base := runtime.NumGoroutine()
	s, err := Open(Config{Dir: t.TempDir(), maintainEvery: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // let maintenance run a few times
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	default:
		t.Fatal("maintenance goroutine still running after Close")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	ctx := context.Background()
	if err := s.Persist(ctx, artifact.Scope{}, []artifact.Artifact{mkArt("x")}); !errors.Is(err, vault.ErrClosed) {
		t.Errorf("Persist after Close = %v", err)
	}
	if err := s.Record(ctx, artifact.Scope{}, artifact.Record{}); !errors.Is(err, vault.ErrClosed) {
		t.Errorf("Record after Close = %v", err)
	}
	if _, err := s.Ancestor(ctx, artifact.Scope{}, nil); !errors.Is(err, vault.ErrClosed) {
		t.Errorf("Ancestor after Close = %v", err)
	}
	if _, _, err := s.Get(ctx, "", dg("x")); !errors.Is(err, vault.ErrClosed) {
		t.Errorf("Get after Close = %v", err)
	}
	_ = s.Stats()
	// Badger's own goroutines wind down asynchronously; allow them a moment.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines: %d after Close, %d before Open", runtime.NumGoroutine(), base)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCodec(t *testing.T) {
	m := vault.Meta{Digest: dg("x"), Chars: 3, TextBytes: 3, RawBytes: 5, Created: 1, LastSeen: -2}
	var m2 vault.Meta
	if err := m2.Decode(m.Encode()); err != nil || m2 != m {
		t.Fatalf("meta round trip = %+v, %v", m2, err)
	}
	n := vault.Node{Length: 4, Parent: dg("p"), HasParent: true, Time: 9, Exposures: map[artifact.Digest]int{dg("a"): 1, dg("b"): 3}}
	var n2 vault.Node
	if err := n2.Decode(n.Encode()); err != nil || n2.Length != 4 || n2.Parent != n.Parent || !n2.HasParent || !maps.Equal(n2.Exposures, n.Exposures) {
		t.Fatalf("node round trip = %+v, %v", n2, err)
	}
	a := mkArt("content")
	var a2 artifact.Artifact
	if err := vault.DecodeContent(vault.EncodeContent(&a), &a2); err != nil || a2.Text != a.Text || string(a2.Raw) != string(a.Raw) || a2.Tool != a.Tool || a2.Args != a.Args {
		t.Fatalf("content round trip = %+v, %v", a2, err)
	}
	corrupt := func(b []byte) [][]byte {
		return [][]byte{nil, {0x7f}, append([]byte{0x7f}, b[1:]...), b[:len(b)-1], append(b[:len(b):len(b)], 0)}
	}
	for _, b := range corrupt(m.Encode()) {
		if m2.Decode(b) == nil {
			t.Errorf("meta %x accepted", b)
		}
	}
	for _, b := range corrupt(n.Encode()) {
		if n2.Decode(b) == nil {
			t.Errorf("node %x accepted", b)
		}
	}
	for _, b := range corrupt(vault.EncodeContent(&a)) {
		if vault.DecodeContent(b, &a2) == nil || vault.SameContent(b, &a) {
			t.Errorf("content %x accepted", b)
		}
	}
}

func TestMissing(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	a, b := mkArt("stored artifact"), mkArt("never stored")
	if err := s.Persist(ctx, artifact.Scope{Tenant: "A"}, []artifact.Artifact{a}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		tenant string
		ask    []artifact.Digest
		want   []artifact.Digest
	}{
		{"A", []artifact.Digest{a.Digest, b.Digest}, []artifact.Digest{b.Digest}},
		{"A", []artifact.Digest{a.Digest}, nil},
		{"B", []artifact.Digest{a.Digest}, []artifact.Digest{a.Digest}}, // another tenant's artifact is not there
		{"A", nil, nil},
	}
	for _, tt := range tests {
		got, err := s.Missing(ctx, artifact.Scope{Tenant: tt.tenant}, tt.ask)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("Missing(%s) = %x, want %x", tt.tenant, got, tt.want)
		}
	}
}

// Stored content is compressed, and an artifact's text and JSON value (near
// copies) cost little more than one of them.
func TestContentCompressed(t *testing.T) {
	a := mkArt(text("compress", 50000))
	b := vault.EncodeContent(&a)
	if len(b) >= len(a.Text) {
		t.Fatalf("encoded %d bytes for %d of text and %d of JSON", len(b), len(a.Text), len(a.Raw))
	}
	var a2 artifact.Artifact
	if err := vault.DecodeContent(b, &a2); err != nil || a2.Text != a.Text || string(a2.Raw) != string(a.Raw) {
		t.Fatal("round trip")
	}
	// Any flipped byte is caught.
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		if vault.DecodeContent(c, &a2) == nil && a2.Text == a.Text && string(a2.Raw) == string(a.Raw) {
			continue // a flip in a place s2 ignores would still decode to the same content
		}
		if vault.SameContent(c, &a) {
			t.Fatalf("flip at %d not detected", i)
		}
	}
}
