package badgervault

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// conversation drives n requests of one conversation the way the compiler
// does: each looks up its ancestor, adds one exposure of a new artifact and
// one more of an old one, and records the cumulative result. It checks
// every lookup against a model and returns the lineage bytes after each
// request.
func conversation(t *testing.T, s *Store, sc artifact.Scope, n int) []int64 {
	t.Helper()
	ctx := context.Background()
	var chain []artifact.Digest
	model := map[artifact.Digest]int{}
	var sizes []int64
	for i := range n {
		chain = append(chain, dg(fmt.Sprint(sc, "msg", i)))
		lin, err := s.Ancestor(ctx, sc, append(chain, dg("next")))
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && (!lin.Found || lin.Length != i) {
			t.Fatalf("request %d: ancestor %v length %d", i, lin.Found, lin.Length)
		}
		if i > 0 && !maps.Equal(lin.Exposures, model) {
			t.Fatalf("request %d: exposures resolve to %d entries, want %d", i, len(lin.Exposures), len(model))
		}
		model[dg(fmt.Sprint("art", i))] = 1
		if i > 0 {
			model[dg(fmt.Sprint("art", i/2))]++
		}
		rec := artifact.Record{ChainEnd: chain[i], Length: i + 1, Parent: lin.Ancestor, HasParent: lin.Found, Exposures: maps.Clone(model)}
		if err := s.Record(ctx, sc, rec); err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, s.Stats().Lineage)
	}
	return sizes
}

// A long conversation's lineage grows as n log n, not n^2: cumulative
// exposures stored whole would take about 40*n^2/2 bytes (3.2 MB for 400
// requests).
func TestLineageBound(t *testing.T) {
	s := openTest(t, Config{})
	sizes := conversation(t, s, artifact.Scope{Tenant: "t"}, 400)
	at200, at400 := sizes[199], sizes[399]
	t.Logf("lineage bytes: 200 requests %d, 400 requests %d", at200, at400)
	if at400 > 400<<10 {
		t.Errorf("400 requests take %d lineage bytes, want < 400 KiB", at400)
	}
	if r := float64(at400) / float64(at200); r > 2.6 {
		t.Errorf("doubling the conversation multiplied its lineage by %.2f (quadratic is 4)", r)
	}
	// The counters agree with a scan of what is stored, within the entry
	// headers Badger adds to values it keeps in the value log (over 1 KiB).
	if n, err := s.lineageSize(); err != nil || n < at400 || n > at400+at400/100 {
		t.Errorf("lineage scan %d (%v), counted %d", n, err, at400)
	}
	// Lineage is in the capacity accounting.
	if st := s.Stats(); st.Bytes != st.Lineage || st.Lineage == 0 {
		t.Errorf("Stats = %+v, want lineage counted in Bytes", st)
	}
}

// A node whose base has gone (expired) is skipped; the next request starts
// over from a whole node and later ones resolve again.
func TestLineageBaseGone(t *testing.T) {
	s := openTest(t, Config{})
	sc := artifact.Scope{Tenant: "t"}
	ctx := context.Background()
	conversation(t, s, sc, 6) // depths 0..5; 4 is based on 0
	chain := make([]artifact.Digest, 7)
	for i := range 6 {
		chain[i] = dg(fmt.Sprint(sc, "msg", i))
	}
	chain[6] = dg("next")
	root := append(vault.ScopePrefix(sc), fmt.Sprintf("%x", chain[0][:])...)
	must(t, s.db.Update(func(txn *badger.Txn) error { return txn.Delete(root) }))
	lin, err := s.Ancestor(ctx, sc, chain)
	if err != nil {
		t.Fatal(err)
	}
	// 5 is based on 4, 4 on the deleted root: nothing above resolves.
	if lin.Found {
		t.Fatalf("Ancestor resolved a node whose base is gone: length %d", lin.Length)
	}
	rec := artifact.Record{ChainEnd: chain[5], Length: 6, Exposures: map[artifact.Digest]int{dg("x"): 2}}
	must(t, s.Record(ctx, sc, rec))
	lin, err = s.Ancestor(ctx, sc, chain)
	if err != nil || !lin.Found || lin.Length != 6 || lin.Exposures[dg("x")] != 2 {
		t.Fatalf("after a whole record: %+v, %v", lin, err)
	}
}

func TestExposureDelta(t *testing.T) {
	a, b, c := dg("a"), dg("b"), dg("c")
	base := map[artifact.Digest]int{a: 1, b: 2}
	tests := []struct {
		cur, want map[artifact.Digest]int
	}{
		{map[artifact.Digest]int{a: 1, b: 2}, map[artifact.Digest]int{}},
		{map[artifact.Digest]int{a: 1, b: 3, c: 1}, map[artifact.Digest]int{b: 3, c: 1}},
		{map[artifact.Digest]int{a: 1}, map[artifact.Digest]int{b: vault.DeletedExposure}},
		{nil, map[artifact.Digest]int{a: vault.DeletedExposure, b: vault.DeletedExposure}},
	}
	for _, tt := range tests {
		d := exposureDelta(tt.cur, base)
		if !maps.Equal(d, tt.want) {
			t.Errorf("delta(%v) = %v, want %v", tt.cur, d, tt.want)
		}
	}
}

// Lineage counts in the cap: a vault full of lineage refuses more, and
// still keeps referenced artifacts alive.
func TestLineageInCapacity(t *testing.T) {
	s := openTest(t, Config{MaxBytes: 4 << 10})
	ctx := context.Background()
	sc := artifact.Scope{Tenant: "t"}
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		exp := map[artifact.Digest]int{dg(fmt.Sprint(i)): 1}
		err = s.Record(ctx, sc, artifact.Record{ChainEnd: dg(fmt.Sprint("c", i)), Length: 1, Exposures: exp})
	}
	if !errors.Is(err, vault.ErrFull) {
		t.Fatalf("Record into a full vault = %v, want ErrFull", err)
	}
	if st := s.Stats(); st.Bytes > st.MaxBytes || st.Lineage != st.Bytes {
		t.Errorf("Stats = %+v", st)
	}
	if n, _ := s.lineageSize(); n != s.Stats().Lineage {
		t.Errorf("lineage scan %d, counted %d", n, s.Stats().Lineage)
	}
}
