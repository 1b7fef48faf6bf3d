package storetest

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// Reader is what a backend declaring Recovery implements besides
// vault.Backend: recovery's read API (recovery.Artifacts).
type Reader interface {
	Resolve(ctx context.Context, tenant, id string) (artifact.Digest, bool, error)
	Search(ctx context.Context, tenant, query string, limit int) ([]artifact.Artifact, error)
}

func reader(t *testing.T, st vault.Backend) Reader {
	t.Helper()
	r, ok := st.(Reader)
	if !ok {
		t.Fatalf("backend %T declares %q but has no Resolve and Search", st, Recovery)
	}
	return r
}

// resolve: a public id maps to its digest within its tenant only; a
// tenant whose name extends another's sees none of its ids; malformed ids
// are not found, never an error.
func (s suite) resolve(t *testing.T) {
	st := s.open(t, Config{})
	r := reader(t, st)
	ctx := context.Background()
	a, b := art(text("resolve", 9000)), art(text("other", 9000))
	persist(t, st, "t1", a)
	persist(t, st, "t1/x", b)
	id := artifact.ID(a.Digest)
	cases := []struct {
		tenant, id string
		found      bool
	}{
		{"t1", id, true},
		{"t2", id, false},
		{"t1/x", id, false},
		{"t1", artifact.ID(b.Digest), false},
		{"t1/x", artifact.ID(b.Digest), true},
		{"t1", id[:len(id)-1], false},
		{"t1", id + "0", false},
		{"t1", "A_" + id[2:], false},
		{"t1", "a_A" + id[3:], false},
		{"t1", "", false},
		{"t1", "a_*", false},
		{"t1", "a_../../../", false},
	}
	for _, c := range cases {
		d, ok, err := r.Resolve(ctx, c.tenant, c.id)
		if err != nil {
			t.Fatalf("Resolve(%q, %q): %v", c.tenant, c.id, err)
		}
		if ok != c.found {
			t.Fatalf("Resolve(%q, %q) found=%v, want %v", c.tenant, c.id, ok, c.found)
		}
		if ok && artifact.ID(d) != c.id {
			t.Fatalf("Resolve(%q) gave the digest of %s", c.id, artifact.ID(d))
		}
	}
}

// search: case-insensitive over text and tool name, newest first (by
// creation time, whatever was seen since), bounded by limit, within the
// tenant; hits carry Digest, Tool and Chars only.
func (s suite) search(t *testing.T) {
	clk := newClock()
	st := s.open(t, Config{Now: clk.Now})
	r := reader(t, st)
	ctx := context.Background()
	mk := func(body, tool string) artifact.Artifact {
		a := art(body)
		a.Tool = tool
		return a
	}
	arts := []artifact.Artifact{
		mk(text("alpha", 5000)+" NEEDLE here", "read_file"),
		mk(text("beta", 5000), "bash"),
		mk(text("gamma", 5000)+" needle again", "bash"),
		mk(`{"role":"user","content":"Wie geht's? ÄÖÜ"}`, "turn"),
	}
	for _, a := range arts {
		clk.Set(clk.Now().Add(time.Second)) // distinct creation times: 0 oldest, 3 newest
		persist(t, st, "t1", a)
	}
	// Seeing the oldest again does not make it newer.
	clk.Set(clk.Now().Add(time.Hour))
	if _, err := st.Missing(ctx, artifact.Scope{Tenant: "t1"}, digests(arts[0])); err != nil {
		t.Fatal(err)
	}
	persist(t, st, "t2", mk("t2 needle "+text("t2", 5000), "bash"))
	cases := []struct {
		query string
		limit int
		want  []int // indexes into arts, newest first
	}{
		{"needle", 10, []int{2, 0}},
		{"NeEdLe", 10, []int{2, 0}},
		{"needle", 1, []int{2}},
		{"BASH", 10, []int{2, 1}},
		{"äöü", 10, []int{3}},
		{"", 10, []int{3, 2, 1, 0}},
		{"", 2, []int{3, 2}},
		{"absent", 10, nil},
		{"needle", 0, nil},
	}
	for _, c := range cases {
		got, err := r.Search(ctx, "t1", c.query, c.limit)
		if err != nil {
			t.Fatal(err)
		}
		var idx []int
		for _, g := range got {
			i := slices.IndexFunc(arts, func(a artifact.Artifact) bool { return a.Digest == g.Digest })
			if i < 0 {
				t.Fatalf("Search(%q) returned another tenant's artifact", c.query)
			}
			if g.Text != "" || g.Raw != nil || g.Args != "" || g.Tool != arts[i].Tool || g.Chars != arts[i].Chars {
				t.Fatalf("Search(%q) hit %d carries more or less than digest, tool and chars: tool %q chars %d text %d bytes",
					c.query, i, g.Tool, g.Chars, len(g.Text))
			}
			idx = append(idx, i)
		}
		if !slices.Equal(idx, c.want) {
			t.Fatalf("Search(%q, %d) = %v, want %v", c.query, c.limit, idx, c.want)
		}
	}
	if got, err := r.Search(ctx, "t3", "", 10); err != nil || len(got) != 0 {
		t.Fatalf("search of an empty tenant: %d hits, %v", len(got), err)
	}
}

// scanCancel is a context that is cancelled by the first look at it made
// from inside the text scan of a search (vault.SearchScan), that is, by a
// client hanging up while a large artifact is being read. It counts the
// looks the scan makes, so that a test sees the scan stop at the next one.
type scanCancel struct {
	context.Context
	cancel  context.CancelFunc
	inScan  atomic.Int32 // looks from inside the scan
	stopped atomic.Bool
}

func newScanCancel() *scanCancel {
	ctx, cancel := context.WithCancel(context.Background())
	return &scanCancel{Context: ctx, cancel: cancel}
}

func (c *scanCancel) Err() error {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.Contains(f.Function, "SearchScan).") {
			c.inScan.Add(1)
			c.cancel()
			break
		}
		if !more {
			break
		}
	}
	return c.Context.Err()
}

// searchBounded: a query longer than vault.MaxSearchQueryChars is refused
// (vault.ErrSearchQueryTooLong), whatever the artifacts; a query at the
// bound is answered; a search whose caller goes away while it reads a large
// artifact stops at the next look at the context, inside that artifact.
func (s suite) searchBounded(t *testing.T) {
	st := s.open(t, Config{})
	r := reader(t, st)
	ctx := context.Background()
	big := func(fill byte, n int) artifact.Artifact {
		a := art(strings.Repeat(string(fill), n))
		a.Tool = "bash"
		return a
	}
	persist(t, st, "t1", big('a', 700_000), big('b', 700_000))

	if _, err := r.Search(ctx, "t1", strings.Repeat("a", 16<<10), 10); !errors.Is(err, vault.ErrSearchQueryTooLong) {
		t.Fatalf("a 16 KB query: %v, want vault.ErrSearchQueryTooLong", err)
	}
	if _, err := r.Search(ctx, "t1", strings.Repeat("é", vault.MaxSearchQueryChars+1), 10); !errors.Is(err, vault.ErrSearchQueryTooLong) {
		t.Fatalf("a query of %d two-byte characters: %v, want vault.ErrSearchQueryTooLong", vault.MaxSearchQueryChars+1, err)
	}
	// The worst case of a naive scan: every position matches all but the
	// query's last character.
	q := strings.Repeat("A", vault.MaxSearchQueryChars-1) + "c"
	if hits, err := r.Search(ctx, "t1", q, 10); err != nil || len(hits) != 0 {
		t.Fatalf("a query at the bound: %d hits, %v", len(hits), err)
	}
	if hits, err := r.Search(ctx, "t1", q[1:len(q)-1], 10); err != nil || len(hits) != 1 {
		t.Fatalf("a query of %d characters found %d artifacts, %v; want 1", len(q)-2, len(hits), err)
	}

	hang := newScanCancel()
	hits, err := r.Search(hang, "t1", "absent", 10)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller went away during the scan: %d hits, %v; want context.Canceled (looks at the context from the scan: %d)", len(hits), err, hang.inScan.Load())
	}
	if n := hang.inScan.Load(); n != 1 {
		t.Fatalf("the scan looked at the cancelled context %d times, want 1: it went on reading after the caller left", n)
	}
}
