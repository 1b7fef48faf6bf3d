package badgervault

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

func TestResolve(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, Config{})
	a := mkArt(text("resolve", 9000))
	if err := s.Persist(ctx, artifact.Scope{Tenant: "t1"}, []artifact.Artifact{a}); err != nil {
		t.Fatal(err)
	}
	// A tenant whose name extends t1's must not see t1's keys through the
	// shared prefix, nor t1 its.
	b := mkArt(text("other", 9000))
	if err := s.Persist(ctx, artifact.Scope{Tenant: "t1/x"}, []artifact.Artifact{b}); err != nil {
		t.Fatal(err)
	}
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
		{"t1", "a_" + string(rune('A')) + id[3:], false},
		{"t1", "", false},
		{"t1", "a_../../../", false},
	}
	for _, c := range cases {
		d, ok, err := s.Resolve(ctx, c.tenant, c.id)
		if err != nil {
			t.Fatal(err)
		}
		if ok != c.found {
			t.Fatalf("Resolve(%q, %q) found=%v, want %v", c.tenant, c.id, ok, c.found)
		}
		if ok {
			if got, _, _ := s.Get(ctx, c.tenant, d); artifact.ID(got.Digest) != c.id {
				t.Fatalf("Resolve(%q) gave digest of %s", c.id, artifact.ID(d))
			}
		}
	}
}

func TestSearch(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := openTest(t, Config{now: clk.Now})
	mk := func(body, tool string) artifact.Artifact {
		a := mkArt(body)
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
		clk.Add(time.Second) // distinct creation times: 0 oldest, 3 newest
		if err := s.Persist(ctx, artifact.Scope{Tenant: "t1"}, []artifact.Artifact{a}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Persist(ctx, artifact.Scope{Tenant: "t2"}, []artifact.Artifact{mk("t2 needle "+text("t2", 5000), "bash")}); err != nil {
		t.Fatal(err)
	}
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
		{"absent", 10, nil},
		{"needle", 0, nil},
	}
	for _, c := range cases {
		got, err := s.Search(ctx, "t1", c.query, c.limit)
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
				t.Fatalf("Search(%q) hit %d carries %+v", c.query, i, g)
			}
			idx = append(idx, i)
		}
		if !slices.Equal(idx, c.want) {
			t.Fatalf("Search(%q, %d) = %v, want %v", c.query, c.limit, idx, c.want)
		}
	}
}

func TestContainsFold(t *testing.T) {
	cases := []struct {
		text, q string
		want    bool
	}{
		{"Hello World", "world", true},
		{"Hello World", "worlds", false},
		{"", "", true},
		{"abc", "", true},
		{"ab", "abc", false},
		{"ÄRGER", "ärger", true},
		{"xXyY", "xy", true},
	}
	for _, c := range cases {
		if got := vault.ContainsFold([]byte(c.text), c.q); got != c.want {
			t.Errorf("containsFold(%q, %q) = %v", c.text, c.q, got)
		}
	}
}

// BenchmarkSearch: one search over a tenant holding 1000 artifacts of
// 8 KB (8 MB of text), the needle in the oldest, so every record is read.
func BenchmarkSearch(b *testing.B) {
	ctx := context.Background()
	clk := newClock()
	s := openTest(b, Config{now: clk.Now})
	for i := range 1000 {
		body := text(fmt.Sprintf("artifact %d", i), 8000)
		if i == 0 {
			body += " NEEDLE"
		}
		clk.Add(time.Millisecond)
		if err := s.Persist(ctx, artifact.Scope{Tenant: "t"}, []artifact.Artifact{mkArt(body)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		hits, err := s.Search(ctx, "t", "needle", 10)
		if err != nil || len(hits) != 1 {
			b.Fatal(err, len(hits))
		}
	}
}

func BenchmarkResolve(b *testing.B) {
	ctx := context.Background()
	s := openTest(b, Config{})
	var id string
	for i := range 1000 {
		a := mkArt(text(fmt.Sprintf("artifact %d", i), 2000))
		if err := s.Persist(ctx, artifact.Scope{Tenant: "t"}, []artifact.Artifact{a}); err != nil {
			b.Fatal(err)
		}
		id = artifact.ID(a.Digest)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, err := s.Resolve(ctx, "t", id); !ok || err != nil {
			b.Fatal(err)
		}
	}
}
