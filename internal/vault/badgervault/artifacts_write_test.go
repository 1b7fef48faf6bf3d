package badgervault

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// TestEncodeAllMatchesEncodeContent: the parallel encoder gives every
// artifact exactly its own encoding, in order, below and above the size
// from which it uses every core.
func TestEncodeAllMatchesEncodeContent(t *testing.T) {
	for _, n := range []int{1, 3, 40} {
		var arts []*artifact.Artifact
		for i := range n {
			a := mkArt(text(fmt.Sprint("enc", n, "-", i), 20_000))
			arts = append(arts, &a)
		}
		enc, err := vault.EncodeAll(arts)
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range arts {
			if !bytes.Equal(enc[i], vault.EncodeContent(a)) {
				t.Fatalf("%d artifacts: encoding %d differs", n, i)
			}
			var got artifact.Artifact
			if err := vault.DecodeContent(enc[i], &got); err != nil || got.Text != a.Text || !bytes.Equal(got.Raw, a.Raw) || got.Tool != a.Tool || got.Args != a.Args {
				t.Fatalf("%d artifacts: encoding %d does not decode to its artifact: %v", n, i, err)
			}
			if len(enc[i]) != cap(enc[i]) || len(enc[i]) > len(a.Text)/2 {
				t.Fatalf("encoding %d: %d bytes (capacity %d) for %d bytes of text", i, len(enc[i]), cap(enc[i]), len(a.Text))
			}
		}
	}
}

// TestEncodeAllRefusesWrongDigest: one artifact not named by its digest
// fails the whole batch with ErrDigest, on one core and on all.
func TestEncodeAllRefusesWrongDigest(t *testing.T) {
	for _, tt := range []struct{ n, bad int }{{1, 0}, {3, 2}, {40, 0}, {40, 17}, {40, 39}} {
		var arts []*artifact.Artifact
		for i := range tt.n {
			a := mkArt(text(fmt.Sprint("dig", tt.n, "-", i), 20_000))
			arts = append(arts, &a)
		}
		arts[tt.bad].Digest[0] ^= 1
		if enc, err := vault.EncodeAll(arts); !errors.Is(err, vault.ErrDigest) || enc != nil {
			t.Errorf("%d artifacts, #%d wrong: err %v, %d encodings", tt.n, tt.bad, err, len(enc))
		}
	}
}

// TestFailedChunkSyncsWhatCommitted: a write of more than writeChunk
// artifacts whose second transaction fails leaves the first chunk's
// records committed; they are synced before the error returns (another
// request may confirm them as soon as they stop being pending), and a
// later Persist confirms them.
func TestFailedChunkSyncsWhatCommitted(t *testing.T) {
	var store atomic.Pointer[Store]
	var armed atomic.Bool
	hook := func(string) (int64, bool, error) {
		if s := store.Load(); armed.Load() && s != nil && s.Stats().Artifacts >= writeChunk {
			return 0, false, errors.New("statfs: injected failure")
		}
		return 1 << 40, true, nil
	}
	s := openTest(t, Config{freeSpace: hook, diskFresh: true})
	store.Store(s)
	armed.Store(true)
	ctx := context.Background()
	sc := artifact.Scope{Tenant: "t"}
	arts := make([]artifact.Artifact, writeChunk+10)
	for i := range arts {
		arts[i] = mkArt(text(fmt.Sprint("chunk", i), 1500))
	}
	syncs := s.Stats().Syncs
	if err := s.Persist(ctx, sc, arts); err == nil {
		t.Fatal("Persist succeeded with its second transaction failing")
	}
	if st := s.Stats(); st.Artifacts != writeChunk || st.Syncs == syncs {
		t.Fatalf("after the failed write: %d artifacts (want %d), syncs %d -> %d (want one for the committed chunk)", st.Artifacts, writeChunk, syncs, st.Syncs)
	}
	armed.Store(false)
	if err := s.Persist(ctx, sc, arts); err != nil {
		t.Fatal(err)
	}
	for _, a := range arts {
		if _, ok, err := s.Get(ctx, "t", a.Digest); !ok || err != nil {
			t.Fatalf("artifact %x: %v, %v", a.Digest[:4], ok, err)
		}
	}
}

// TestReadBackComparesStoredBytes: read-back accepts exactly the bytes
// written and refuses anything else.
func TestReadBackComparesStoredBytes(t *testing.T) {
	s := openTest(t, Config{})
	a := mkArt(text("readback", 5000))
	if err := s.Persist(context.Background(), artifact.Scope{Tenant: "t"}, []artifact.Artifact{a}); err != nil {
		t.Fatal(err)
	}
	good := vault.EncodeContent(&a)
	if err := s.readBack("t", []*artifact.Artifact{&a}, [][]byte{good}, nil); err != nil {
		t.Fatalf("intact: %v", err)
	}
	bad := bytes.Clone(good)
	bad[len(bad)-1] ^= 1
	if err := s.readBack("t", []*artifact.Artifact{&a}, [][]byte{bad}, nil); !errors.Is(err, vault.ErrReadBack) {
		t.Fatalf("different bytes: %v, want ErrReadBack", err)
	}
	other := mkArt(text("never stored", 5000))
	if err := s.readBack("t", nil, nil, []*artifact.Artifact{&other}); err == nil {
		t.Fatal("an absent artifact read back")
	}
}
