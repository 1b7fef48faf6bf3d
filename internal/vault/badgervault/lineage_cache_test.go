package badgervault

import (
	"bytes"
	"context"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// The compiler's cache state travels with the lineage node: recorded,
// returned as Lineage.Cache, and absent (nil) for a node recorded without
// one.
func TestLineageCarriesCacheState(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	sc := artifact.Scope{Tenant: "t"}
	chain := []artifact.Digest{{1}, {2}, {3}}
	state := []byte{1, 2, 3, 4}
	if err := s.Record(ctx, sc, artifact.Record{ChainEnd: chain[0], Length: 1, Cache: state}); err != nil {
		t.Fatal(err)
	}
	lin, err := s.Ancestor(ctx, sc, chain[:2])
	if err != nil || !lin.Found || !bytes.Equal(lin.Cache, state) {
		t.Fatalf("Ancestor = %+v, %v", lin, err)
	}
	if err := s.Record(ctx, sc, artifact.Record{ChainEnd: chain[1], Length: 2}); err != nil {
		t.Fatal(err)
	}
	if lin, err := s.Ancestor(ctx, sc, chain); err != nil || lin.Length != 2 || lin.Cache != nil {
		t.Fatalf("without a state: %+v, %v", lin, err)
	}
}
