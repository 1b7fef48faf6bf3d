package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/compiler"
	"github.com/tokenterminator/caddy-token-terminator/vault"
)

// Reader is what a backend declaring Recovery implements besides
// vault.Backend: recovery's read API (recovery.Artifacts).
type Reader interface {
	Resolve(ctx context.Context, tenant, id string) (compiler.Digest, bool, error)
	Search(ctx context.Context, tenant, query string, limit int) ([]compiler.Artifact, error)
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
	id := compiler.ArtifactID(a.Digest)
	cases := []struct {
		tenant, id string
		found      bool
	}{
		{"t1", id, true},
		{"t2", id, false},
		{"t1/x", id, false},
		{"t1", compiler.ArtifactID(b.Digest), false},
		{"t1/x", compiler.ArtifactID(b.Digest), true},
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
		if ok && compiler.ArtifactID(d) != c.id {
			t.Fatalf("Resolve(%q) gave the digest of %s", c.id, compiler.ArtifactID(d))
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
	mk := func(body, tool string) compiler.Artifact {
		a := art(body)
		a.Tool = tool
		return a
	}
	arts := []compiler.Artifact{
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
	if _, err := st.Missing(ctx, compiler.Scope{Tenant: "t1"}, digests(arts[0])); err != nil {
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
			i := slices.IndexFunc(arts, func(a compiler.Artifact) bool { return a.Digest == g.Digest })
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
