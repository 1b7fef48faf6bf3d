package badgervault

import (
	"bytes"
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// A record written before the current artifact identity (filed under
// sha256(Text)) stays readable and verified, so receipts already sent for
// it still recover; a record that matches neither identity is refused.
func TestLegacyTextDigestRecordsStayReadable(t *testing.T) {
	s := openTest(t, Config{})
	ctx := context.Background()
	put := func(a artifact.Artifact) {
		m := vault.Meta{Digest: a.Digest, Chars: a.Chars, TextBytes: len(a.Text), RawBytes: len(a.Raw), Created: 1, LastSeen: time.Now().UnixNano()}
		if err := s.db.Update(func(txn *badger.Txn) error {
			if err := txn.Set(vault.ArtKey("t", a.Digest), vault.EncodeContent(&a)); err != nil {
				return err
			}
			return txn.Set(vault.MetaKey("t", a.Digest), m.Encode())
		}); err != nil {
			t.Fatal(err)
		}
	}
	legacy := mkArt(text("legacy", 9000))
	legacy.Digest = sha256.Sum256([]byte(legacy.Text))
	put(legacy)
	got, ok, err := s.Get(ctx, "t", legacy.Digest)
	if err != nil || !ok || got.Text != legacy.Text || !bytes.Equal(got.Raw, legacy.Raw) {
		t.Fatalf("legacy record: Get = %v, %v", ok, err)
	}
	if missing, err := s.Missing(ctx, artifact.Scope{Tenant: "t"}, []artifact.Digest{legacy.Digest}); err != nil || len(missing) != 0 {
		t.Fatalf("legacy record reported missing: %x, %v", missing, err)
	}

	wrong := mkArt(text("wrong", 9000))
	wrong.Digest = artifact.DigestOf(wrong.Text, []byte(`"other spelling"`))
	put(wrong)
	if _, ok, err := s.Get(ctx, "t", wrong.Digest); ok || err == nil {
		t.Fatalf("record under another spelling's identity: Get = %v, %v", ok, err)
	}
	if missing, err := s.Missing(ctx, artifact.Scope{Tenant: "t"}, []artifact.Digest{wrong.Digest}); err != nil || len(missing) != 1 {
		t.Fatalf("record under another spelling's identity confirmed: %x, %v", missing, err)
	}
}
