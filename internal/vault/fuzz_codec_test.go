package vault

import (
	"crypto/sha256"
	"maps"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// FuzzNodeDecode: any stored bytes decode to a node or an error, never a
// panic, and a decoded node survives its own encoding unchanged.
func FuzzNodeDecode(f *testing.F) {
	whole := Node{Length: 3, Time: 7, Exposures: map[artifact.Digest]int{dg("a"): 1}}
	delta := Node{Length: 9, Parent: dg("p"), HasParent: true, Depth: 6, Base: dg("b"), HasBase: true,
		Exposures: map[artifact.Digest]int{dg("a"): 2, dg("c"): DeletedExposure}}
	f.Add(whole.Encode())
	f.Add(delta.Encode())
	v1 := whole.Encode()
	v1[0] = codecV1
	f.Add(v1)
	f.Fuzz(func(t *testing.T, b []byte) {
		var n Node
		if n.Decode(b) != nil {
			return
		}
		var again Node
		if err := again.Decode(n.Encode()); err != nil {
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
	f.Add(EncodeContent(&a))
	f.Add([]byte{contentV2, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if CheckSealedContent(b, "t", a.Digest, nil) == nil {
			var got artifact.Artifact
			if err := DecodeContent(b, &got); err != nil || got.Text != a.Text {
				t.Fatalf("checkContent accepted content that is not the artifact: %v", err)
			}
		}
	})
}

func dg(s string) artifact.Digest { return sha256.Sum256([]byte(s)) }
