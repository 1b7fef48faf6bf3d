package badgervault

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/seal"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

const sealMarker = "PLANTED-MARKER-7f3a9c-PROD_DB_PASSWORD"

func sealKeys(t *testing.T, secret string) *seal.Keys {
	t.Helper()
	k, err := seal.Derive([]byte("gateway tenant key for the tests"), secret)
	must(t, err)
	return k
}

// markedArt is an artifact whose text carries sealMarker once, in text
// that does not compress it away.
func markedArt(seed string) artifact.Artifact {
	s := randomText(seed, 6000)
	return mkArt(s[:3000] + sealMarker + s[3000:])
}

// keyed returns a filed under its keyed identity, as the compiler names
// it with k.
func keyed(k *seal.Keys, a artifact.Artifact) artifact.Artifact {
	a.Digest = k.ID(a.Digest)
	return a
}

// dirHolds reports whether any file under dir contains b.
func dirHolds(t *testing.T, dir string, b []byte) bool {
	t.Helper()
	found := false
	must(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		found = found || bytes.Contains(data, b)
		return nil
	}))
	return found
}

// With the tenant's keys in the context, no Badger file holds the
// artifact's text; the right keys read it back exactly, other keys or none
// read nothing, including from a copy of the files. Without keys the same
// write leaves the marker on disk (the check can see it).
func TestSealedAtRestBadger(t *testing.T) {
	for _, sealed := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "vault")
		s, err := Open(Config{Dir: dir})
		must(t, err)
		ctx := context.Background()
		if sealed {
			ctx = seal.NewContext(ctx, sealKeys(t, "sk-alice"))
		}
		a := markedArt("sealed")
		if sealed {
			a = keyed(sealKeys(t, "sk-alice"), a)
		}
		must(t, s.Persist(ctx, artifact.Scope{Tenant: "t"}, []artifact.Artifact{a}))
		must(t, s.Close())
		if got := dirHolds(t, dir, []byte(sealMarker)); got == sealed {
			t.Fatalf("sealed=%v: marker on disk = %v", sealed, got)
		}
		if !sealed {
			continue
		}
		// A copy of the files, opened as another gateway's vault.
		cp := filepath.Join(t.TempDir(), "copy")
		must(t, os.CopyFS(cp, os.DirFS(dir)))
		for _, d := range []string{dir, cp} {
			s := openTest(t, Config{Dir: d})
			got, ok, err := s.Get(seal.NewContext(context.Background(), sealKeys(t, "sk-alice")), "t", a.Digest)
			if err != nil || !ok || got.Text != a.Text || !bytes.Equal(got.Raw, a.Raw) || got.Tool != a.Tool || got.Args != a.Args {
				t.Fatalf("%s: Get with the right keys = %v, %v", d, ok, err)
			}
			for name, ctx := range map[string]context.Context{
				"other keys": seal.NewContext(context.Background(), sealKeys(t, "sk-mallory")),
				"no keys":    context.Background(),
			} {
				got, _, err := s.Get(ctx, "t", a.Digest)
				if err == nil || got.Text != "" || strings.Contains(err.Error(), sealMarker) {
					t.Fatalf("%s: Get with %s = %q, %v; want an error and no content", d, name, got.Text, err)
				}
				if hits, err := s.Search(ctx, "t", sealMarker, 10); err != nil || len(hits) != 0 {
					t.Fatalf("%s: Search with %s = %d hits, %v", d, name, len(hits), err)
				}
			}
			if hits, err := s.Search(seal.NewContext(context.Background(), sealKeys(t, "sk-alice")), "t", sealMarker, 10); err != nil || len(hits) != 1 {
				t.Fatalf("%s: Search with the right keys = %d hits, %v", d, len(hits), err)
			}
			s.Close()
		}
	}
}

// rewriteValue replaces the stored content of tenant's d by f(value).
func rewriteValue(t *testing.T, s *Store, tenant string, d artifact.Digest, f func([]byte) []byte) {
	t.Helper()
	must(t, s.db.Update(func(txn *badger.Txn) error {
		item, err := txn.Get(vault.ArtKey(tenant, d))
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		return txn.Set(vault.ArtKey(tenant, d), f(v))
	}))
}

// One changed ciphertext byte, anywhere, or a sealed value moved to
// another artifact's key makes that artifact an error, never other
// content; the other artifacts read on.
func TestSealedTamper(t *testing.T) {
	s := openTest(t, Config{})
	ctx := seal.NewContext(context.Background(), sealKeys(t, "sk-alice"))
	a, b := keyed(sealKeys(t, "sk-alice"), markedArt("tamper a")), keyed(sealKeys(t, "sk-alice"), markedArt("tamper b"))
	must(t, s.Persist(ctx, artifact.Scope{Tenant: "t"}, []artifact.Artifact{a, b}))
	var size int
	rewriteValue(t, s, "t", a.Digest, func(v []byte) []byte { size = len(v); return v })
	// Sealing costs a fixed 29 bytes per artifact: marker, nonce, tag.
	if plain := len(vault.EncodeContent(&a)); size != plain+1+seal.Overhead {
		t.Fatalf("sealed record %d bytes, plain %d", size, plain)
	}
	for _, i := range []int{1, 1 + seal.NonceSize, size / 2, size - 1} {
		rewriteValue(t, s, "t", a.Digest, func(v []byte) []byte { v[i] ^= 0x01; return v })
		got, ok, err := s.Get(ctx, "t", a.Digest)
		if err == nil || ok || got.Text != "" {
			t.Fatalf("byte %d flipped: Get = %v, %v", i, ok, err)
		}
		rewriteValue(t, s, "t", a.Digest, func(v []byte) []byte { v[i] ^= 0x01; return v })
		if got, ok, err := s.Get(ctx, "t", a.Digest); err != nil || !ok || got.Text != a.Text {
			t.Fatalf("byte %d restored: Get = %v, %v", i, ok, err)
		}
	}
	// b's sealed value under a's key: bound to b's digest, so it fails.
	var bv []byte
	rewriteValue(t, s, "t", b.Digest, func(v []byte) []byte { bv = bytes.Clone(v); return v })
	rewriteValue(t, s, "t", a.Digest, func([]byte) []byte { return bv })
	if got, ok, err := s.Get(ctx, "t", a.Digest); err == nil || ok || got.Text != "" {
		t.Fatalf("swapped value: Get = %v, %v", ok, err)
	}
	if got, ok, err := s.Get(ctx, "t", b.Digest); err != nil || !ok || got.Text != b.Text {
		t.Fatalf("the untouched artifact: Get = %v, %v", ok, err)
	}
	// A tampered record found by Missing is dropped and reported missing,
	// so the compiler stores it again.
	s2 := openTest(t, Config{})
	must(t, s2.Persist(ctx, artifact.Scope{Tenant: "t"}, []artifact.Artifact{a}))
	rewriteValue(t, s2, "t", a.Digest, func(v []byte) []byte { v[len(v)-1] ^= 0x80; return v })
	s2.checked.remove("t", a.Digest)
	if m, err := s2.Missing(ctx, artifact.Scope{Tenant: "t"}, []artifact.Digest{a.Digest}); err != nil || len(m) != 1 {
		t.Fatalf("Missing of a tampered record = %v, %v", m, err)
	}
}

// A vault written in plain text stays readable with keys, by the ids its
// receipts carry. With keys the same content is filed anew, sealed, under
// its keyed id; the plain record is not refreshed and ages out as it is.
// Nothing is filed under a content id with keys.
func TestPlainVaultReadableUntilItAgesOut(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vault")
	s, err := Open(Config{Dir: dir})
	must(t, err)
	a := markedArt("plain a")
	must(t, s.Persist(context.Background(), artifact.Scope{Tenant: "t"}, []artifact.Artifact{a}))
	must(t, s.Close())

	s = openTest(t, Config{Dir: dir})
	k := sealKeys(t, "sk-alice")
	ctx := seal.NewContext(context.Background(), k)
	if got, ok, err := s.Get(ctx, "t", a.Digest); err != nil || !ok || got.Text != a.Text {
		t.Fatalf("plain record read with keys: %v, %v", ok, err)
	}
	if err := s.Persist(ctx, artifact.Scope{Tenant: "t"}, []artifact.Artifact{markedArt("plain b")}); !errors.Is(err, vault.ErrDigest) {
		t.Fatalf("Persist with keys under a content id: %v", err)
	}
	ka := keyed(k, a)
	must(t, s.Persist(ctx, artifact.Scope{Tenant: "t"}, []artifact.Artifact{ka}))
	stored := func(d artifact.Digest) (v []byte) {
		rewriteValue(t, s, "t", d, func(x []byte) []byte { v = bytes.Clone(x); return x })
		return v
	}
	if !vault.IsSealed(stored(ka.Digest)) || vault.IsSealed(stored(a.Digest)) {
		t.Fatal("want the keyed record sealed and the plain one as it was")
	}
	if got, ok, err := s.Get(ctx, "t", ka.Digest); err != nil || !ok || got.Text != a.Text {
		t.Fatalf("keyed record: %v, %v", ok, err)
	}
	if _, _, err := s.Get(context.Background(), "t", ka.Digest); !errors.Is(err, vault.ErrSealed) {
		t.Fatalf("sealed record read without keys: %v", err)
	}
	// A plain record planted under a keyed id is never confirmed.
	rewriteValue(t, s, "t", ka.Digest, func([]byte) []byte { return stored(a.Digest) })
	s.checked.remove("t", ka.Digest)
	if m, err := s.Missing(ctx, artifact.Scope{Tenant: "t"}, []artifact.Digest{ka.Digest}); err != nil || len(m) != 1 {
		t.Fatalf("Missing of a plain record under a keyed id = %v, %v", m, err)
	}
}
