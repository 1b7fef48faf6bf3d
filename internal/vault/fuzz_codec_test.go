package vault

import (
	"maps"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
)

// FuzzNodeDecode: any stored bytes decode to a node or an error, never a
// panic, and a decoded node survives its own encoding unchanged.
func FuzzNodeDecode(f *testing.F) {
	whole := node{Length: 3, Time: 7, Exposures: map[compiler.Digest]int{dg("a"): 1}}
	delta := node{Length: 9, Parent: dg("p"), HasParent: true, Depth: 6, Base: dg("b"), HasBase: true,
		Exposures: map[compiler.Digest]int{dg("a"): 2, dg("c"): deletedExposure}}
	f.Add(whole.encode())
	f.Add(delta.encode())
	v1 := whole.encode()
	v1[0] = codecV1
	f.Add(v1)
	f.Fuzz(func(t *testing.T, b []byte) {
		var n node
		if n.decode(b) != nil {
			return
		}
		var again node
		if err := again.decode(n.encode()); err != nil {
			t.Fatalf("re-encoded node does not decode: %v", err)
		}
		if again.Length != n.Length || again.Parent != n.Parent || again.HasParent != n.HasParent ||
			again.Time != n.Time || again.Depth != n.Depth || again.Base != n.Base || again.HasBase != n.HasBase ||
			!maps.Equal(again.Exposures, n.Exposures) {
			t.Fatalf("round trip changed the node: %+v -> %+v", n, again)
		}
	})
}

// FuzzCheckContent: arbitrary stored content is either intact for its
// digest or an error, never a panic.
func FuzzCheckContent(f *testing.F) {
	a := mkArt("fuzz content")
	f.Add(encodeContent(&a))
	f.Add([]byte{contentV2, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if checkContent(b, "t", a.Digest, nil) == nil {
			var got compiler.Artifact
			if err := decodeContent(b, &got); err != nil || got.Text != a.Text {
				t.Fatalf("checkContent accepted content that is not the artifact: %v", err)
			}
		}
	})
}
