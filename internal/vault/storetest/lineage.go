package storetest

import (
	"bytes"
	"context"
	"maps"
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// ancestor: the longest recorded proper prefix wins, the full chain is never
// its own ancestor, and exposures (cumulative) and the compiler's cache state
// come back as recorded.
func (s suite) ancestor(t *testing.T) {
	st := s.open(t, Config{})
	ctx := context.Background()
	sc := artifact.Scope{Tenant: "t", Session: "s"}
	ch := chain("conv", 6)
	a, b := art(text("a", 100)).Digest, art(text("b", 100)).Digest
	r2 := artifact.Record{ChainEnd: ch[1], Length: 2, Exposures: map[artifact.Digest]int{a: 1}}
	r4 := artifact.Record{ChainEnd: ch[3], Length: 4, Parent: ch[1], HasParent: true, Exposures: map[artifact.Digest]int{a: 2, b: 1},
		Cache: []byte("opaque cache state \x00\xff")}
	for _, r := range []artifact.Record{r2, r4, r4} { // recording twice writes the same node
		if err := st.Record(ctx, sc, r); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name  string
		chain []artifact.Digest
		found bool
		want  artifact.Record
	}{
		{"longest prefix", ch, true, r4},
		{"next step", ch[:5], true, r4},
		{"full chain is not its own ancestor", ch[:4], true, r2},
		{"only the full chain recorded", ch[:2], false, artifact.Record{}},
		{"one message", ch[:1], false, artifact.Record{}},
		{"empty", nil, false, artifact.Record{}},
		{"other conversation", chain("other", 6), false, artifact.Record{}},
	}
	// A long conversation: the ancestor lies far back in the chain.
	long := chain("long", 600)
	r11 := artifact.Record{ChainEnd: long[10], Length: 11, Exposures: map[artifact.Digest]int{b: 3}}
	if err := st.Record(ctx, sc, r11); err != nil {
		t.Fatal(err)
	}
	cases = append(cases, struct {
		name  string
		chain []artifact.Digest
		found bool
		want  artifact.Record
	}{"600 messages, ancestor at 11", long, true, r11})
	for _, c := range cases {
		lin, err := st.Ancestor(ctx, sc, c.chain)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if lin.Found != c.found {
			t.Fatalf("%s: found=%v, want %v", c.name, lin.Found, c.found)
		}
		if !c.found {
			continue
		}
		if lin.Ancestor != c.want.ChainEnd || lin.Length != c.want.Length || !maps.Equal(lin.Exposures, c.want.Exposures) {
			t.Fatalf("%s: ancestor length %d exposures %v, want length %d exposures %v",
				c.name, lin.Length, lin.Exposures, c.want.Length, c.want.Exposures)
		}
		if !bytes.Equal(lin.Cache, c.want.Cache) {
			t.Fatalf("%s: cache state %q, want %q", c.name, lin.Cache, c.want.Cache)
		}
	}
}

// lineageTTL: a lineage node is gone once Retention has passed (wall clock).
func (s suite) lineageTTL(t *testing.T) {
	st := s.open(t, Config{Retention: time.Second})
	ctx := context.Background()
	sc := artifact.Scope{Tenant: "t"}
	ch := chain("ttl", 3)
	if err := st.Record(ctx, sc, artifact.Record{ChainEnd: ch[1], Length: 2}); err != nil {
		t.Fatal(err)
	}
	if lin, err := st.Ancestor(ctx, sc, ch); err != nil || !lin.Found {
		t.Fatalf("lineage not found right after Record: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		lin, err := st.Ancestor(ctx, sc, ch)
		if err != nil {
			t.Fatal(err)
		}
		if !lin.Found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("lineage still present 5s after a 1s retention")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
