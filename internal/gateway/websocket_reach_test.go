package gateway

import (
	"encoding/binary"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

func digestN(n int) artifact.Digest {
	var d artifact.Digest
	binary.BigEndian.PutUint64(d[:], uint64(n)+1)
	return d
}

func digestsN(from, to int) []artifact.Digest {
	var out []artifact.Digest
	for i := from; i < to; i++ {
		out = append(out, digestN(i))
	}
	return out
}

// A chain's reach: the current message's digests first, no repeats, at
// most wsReachMax (the newest kept), and the chain's own list shared when
// a continuation adds nothing to it.
func TestWebSocketChainReachBounded(t *testing.T) {
	full := digestsN(0, wsReachMax)
	cases := []struct {
		name      string
		a, b      []artifact.Digest
		want      []artifact.Digest
		sharesA   bool
		wantFirst artifact.Digest
	}{
		{name: "opening", b: digestsN(0, 3), want: digestsN(0, 3)},
		{name: "nothing new", a: digestsN(0, 3), b: digestsN(1, 2), want: digestsN(0, 3), sharesA: true},
		{name: "new first", a: digestsN(0, 2), b: digestsN(1, 3),
			want: []artifact.Digest{digestN(1), digestN(2), digestN(0)}},
		{name: "full chain, one new", a: full, b: digestsN(wsReachMax, wsReachMax+1),
			want: append(digestsN(wsReachMax, wsReachMax+1), full[:wsReachMax-1]...)},
		{name: "opening over the bound", b: digestsN(0, wsReachMax+10), want: full},
	}
	for _, tc := range cases {
		got := unionDigests(tc.a, tc.b)
		if len(got) != len(tc.want) {
			t.Fatalf("%s: %d digests, want %d", tc.name, len(got), len(tc.want))
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Fatalf("%s: digest %d differs", tc.name, i)
			}
		}
		if tc.sharesA && &got[0] != &tc.a[0] {
			t.Fatalf("%s: a copy where the chain's list could be shared", tc.name)
		}
	}
}

// A long chain whose every continuation reaches one more artifact keeps
// at most wsReachMax of them, the newest included.
func TestWebSocketChainReachLongChain(t *testing.T) {
	var reach []artifact.Digest
	for i := range wsReachMax + 64 {
		reach = unionDigests(reach, []artifact.Digest{digestN(i)})
	}
	if len(reach) != wsReachMax || reach[0] != digestN(wsReachMax+63) {
		t.Fatalf("%d digests after %d continuations, newest first: %v", len(reach), wsReachMax+64, reach[0] == digestN(wsReachMax+63))
	}
}

// BenchmarkChainReach: a continuation of a chain of wsReachMax digests,
// reaching nothing new (the list is shared) or one more.
func BenchmarkChainReach(b *testing.B) {
	a := digestsN(0, wsReachMax)
	for _, bc := range []struct {
		name string
		add  []artifact.Digest
	}{{"nothing new", digestsN(5, 7)}, {"one new", digestsN(wsReachMax, wsReachMax+1)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = unionDigests(a, bc.add)
			}
		})
	}
}
