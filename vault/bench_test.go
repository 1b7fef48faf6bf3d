package vault

import (
	"context"
	"fmt"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/compiler"
)

// benchArts returns 50 distinct artifacts of about 20 KB of text each.
func benchArts(round int) []compiler.Artifact {
	arts := make([]compiler.Artifact, 50)
	for i := range arts {
		arts[i] = mkArt(text(fmt.Sprint("r", round, "a", i), 20_000))
	}
	return arts
}

// BenchmarkPersistCold writes 50 new 20 KB artifacts per op: one batch, one
// sync, one read-back.
func BenchmarkPersistCold(b *testing.B) {
	s := openTest(b, Config{MaxBytes: 1 << 40})
	ctx := context.Background()
	sc := compiler.Scope{Tenant: "bench"}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		arts := benchArts(i)
		b.StartTimer()
		if err := s.Persist(ctx, sc, arts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPersistWarm verifies the same 50 artifacts, already stored.
func BenchmarkPersistWarm(b *testing.B) {
	s := openTest(b, Config{})
	ctx := context.Background()
	sc := compiler.Scope{Tenant: "bench"}
	arts := benchArts(0)
	if err := s.Persist(ctx, sc, arts); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Persist(ctx, sc, arts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAncestor looks up a 200-message chain whose longest recorded
// prefix is at len-3 (two misses, one hit), among 200 recorded conversations.
func BenchmarkAncestor(b *testing.B) {
	s := openTest(b, Config{})
	ctx := context.Background()
	sc := compiler.Scope{Tenant: "bench"}
	chain := make([]compiler.Digest, 200)
	for i := range chain {
		chain[i] = dg(fmt.Sprint("m", i))
	}
	exp := map[compiler.Digest]int{}
	for i := range 20 {
		exp[dg(fmt.Sprint("art", i))] = 1
	}
	for i := range 198 {
		if err := s.Record(ctx, sc, compiler.Record{ChainEnd: chain[i], Length: i + 1, Exposures: exp}); err != nil {
			b.Fatal(err)
		}
	}
	for c := range 200 { // other conversations, so lookups are not all in one memtable corner
		if err := s.Record(ctx, sc, compiler.Record{ChainEnd: dg(fmt.Sprint("other", c)), Length: 1}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		lin, err := s.Ancestor(ctx, sc, chain)
		if err != nil || !lin.Found || lin.Length != 198 {
			b.Fatal(lin, err)
		}
	}
}

// BenchmarkAncestorMiss walks a 500-message chain with nothing recorded.
func BenchmarkAncestorMiss(b *testing.B) {
	s := openTest(b, Config{})
	ctx := context.Background()
	chain := make([]compiler.Digest, 500)
	for i := range chain {
		chain[i] = dg(fmt.Sprint("m", i))
	}
	if err := s.Record(ctx, compiler.Scope{Tenant: "x"}, compiler.Record{ChainEnd: dg("x"), Length: 1}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if lin, err := s.Ancestor(ctx, compiler.Scope{Tenant: "bench"}, chain); err != nil || lin.Found {
			b.Fatal(lin, err)
		}
	}
}
