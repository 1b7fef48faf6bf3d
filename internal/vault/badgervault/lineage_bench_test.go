package badgervault

import (
	"context"
	"fmt"
	"maps"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// deltaConversation records n requests of one conversation with parents, as
// the compiler does (each adds one artifact), and returns its chain.
func deltaConversation(b *testing.B, s *Store, sc artifact.Scope, n int) []artifact.Digest {
	ctx := context.Background()
	chain := make([]artifact.Digest, n+2)
	for i := range chain {
		chain[i] = dg(fmt.Sprint("m", i))
	}
	exp := map[artifact.Digest]int{}
	for i := range n {
		lin, err := s.Ancestor(ctx, sc, chain[:i+1])
		if err != nil {
			b.Fatal(err)
		}
		exp[dg(fmt.Sprint("art", i))] = 1
		rec := artifact.Record{ChainEnd: chain[i], Length: i + 1, Parent: lin.Ancestor, HasParent: lin.Found, Exposures: maps.Clone(exp)}
		if err := s.Record(ctx, sc, rec); err != nil {
			b.Fatal(err)
		}
	}
	return chain
}

// BenchmarkAncestorDelta resolves the newest node of a 200-request
// conversation stored as deltas (at most 8 base links).
func BenchmarkAncestorDelta(b *testing.B) {
	s := openTest(b, Config{})
	sc := artifact.Scope{Tenant: "bench"}
	chain := deltaConversation(b, s, sc, 200)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		lin, err := s.Ancestor(ctx, sc, chain[:201])
		if err != nil || !lin.Found || lin.Length != 200 || len(lin.Exposures) != 200 {
			b.Fatal(lin.Length, len(lin.Exposures), err)
		}
	}
}

// BenchmarkRecordDelta records request 201 of that conversation again and
// again: base lookup, resolve, delta, one write.
func BenchmarkRecordDelta(b *testing.B) {
	s := openTest(b, Config{})
	sc := artifact.Scope{Tenant: "bench"}
	chain := deltaConversation(b, s, sc, 200)
	ctx := context.Background()
	lin, err := s.Ancestor(ctx, sc, chain[:201])
	if err != nil {
		b.Fatal(err)
	}
	exp := maps.Clone(lin.Exposures)
	exp[dg("new")] = 1
	rec := artifact.Record{ChainEnd: chain[200], Length: 201, Parent: lin.Ancestor, HasParent: true, Exposures: exp}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Record(ctx, sc, rec); err != nil {
			b.Fatal(err)
		}
	}
}
