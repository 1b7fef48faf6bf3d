package seal

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

var tk = []byte("gateway tenant key, 32 bytes....")

func derive(t testing.TB, key []byte, secret string) *Keys {
	t.Helper()
	k, err := Derive(key, secret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestDeriveRefusesEmpty(t *testing.T) {
	for _, c := range []struct {
		key    []byte
		secret string
	}{{nil, "sk"}, {tk, ""}, {nil, ""}} {
		if _, err := Derive(c.key, c.secret); err == nil {
			t.Errorf("Derive(%q, %q) accepted", c.key, c.secret)
		}
	}
}

func TestSealOpen(t *testing.T) {
	alice := derive(t, tk, "sk-alice")
	plain := []byte("PROD_DB_PASSWORD=hunter2 and more")
	ad := []byte("tenant\x00digest")
	sealed := alice.Seal([]byte{0x20}, plain, ad)
	if sealed[0] != 0x20 || len(sealed) != 1+len(plain)+Overhead {
		t.Fatalf("sealed form: %d bytes, prefix %x", len(sealed), sealed[0])
	}
	if bytes.Contains(sealed, []byte("hunter2")) {
		t.Fatal("plain text in the sealed form")
	}
	if !bytes.Equal(alice.Seal(nil, plain, ad), sealed[1:]) {
		t.Fatal("sealing is not deterministic")
	}
	cases := []struct {
		name string
		keys *Keys
		in   []byte
		ad   []byte
		ok   bool
	}{
		{"same keys and ad", alice, sealed[1:], ad, true},
		{"the same secret derived again", derive(t, tk, "sk-alice"), sealed[1:], ad, true},
		{"another secret", derive(t, tk, "sk-bob"), sealed[1:], ad, false},
		{"another tenant key", derive(t, []byte("another gateway's tenant key...."), "sk-alice"), sealed[1:], ad, false},
		{"other ad", alice, sealed[1:], []byte("tenant\x00other"), false},
		{"no ad", alice, sealed[1:], nil, false},
		{"truncated", alice, sealed[1 : len(sealed)-1], ad, false},
		{"too short", alice, sealed[1 : 1+Overhead-1], ad, false},
		{"empty", alice, nil, ad, false},
	}
	for _, c := range cases {
		got, err := c.keys.Open(nil, c.in, c.ad)
		if c.ok != (err == nil) || (c.ok && !bytes.Equal(got, plain)) || (!c.ok && (got != nil || !errors.Is(err, ErrOpen))) {
			t.Errorf("%s: Open = %q, %v", c.name, got, err)
		}
	}
	// Every single flipped bit anywhere fails.
	for i := range len(sealed) - 1 {
		for bit := range 8 {
			b := bytes.Clone(sealed[1:])
			b[i] ^= 1 << bit
			if got, err := alice.Open(nil, b, ad); err == nil || got != nil {
				t.Fatalf("byte %d bit %d flipped: opened", i, bit)
			}
		}
	}
	// Different plain texts under one key get different nonces.
	if bytes.Equal(alice.Seal(nil, []byte("a"), ad)[:NonceSize], alice.Seal(nil, []byte("b"), ad)[:NonceSize]) {
		t.Fatal("two plain texts share a nonce")
	}
}

func TestContext(t *testing.T) {
	if FromContext(context.Background()) != nil {
		t.Fatal("keys from nowhere")
	}
	k := derive(t, tk, "sk")
	if FromContext(NewContext(context.Background(), k)) != k {
		t.Fatal("keys lost")
	}
	if NewContext(context.Background(), nil) != context.Background() {
		t.Fatal("nil keys changed the context")
	}
}

// Open of any bytes either fails cleanly or returns what was sealed: never
// other content, never a panic.
func FuzzOpen(f *testing.F) {
	k := derive(f, tk, "sk-alice")
	ad := []byte("ad")
	f.Add(k.Seal(nil, []byte("hello"), ad), ad)
	f.Add([]byte{}, []byte{})
	f.Add(make([]byte, Overhead), ad)
	f.Fuzz(func(t *testing.T, in, ad2 []byte) {
		got, err := k.Open(nil, in, ad2)
		if err != nil {
			if got != nil {
				t.Fatal("content with an error")
			}
			return
		}
		if !bytes.Equal(k.Seal(nil, got, ad2), in) {
			t.Fatal("opened bytes that are not the seal of what came out")
		}
	})
}

func BenchmarkSeal1MB(b *testing.B) {
	k := derive(b, tk, "sk")
	plain := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	dst := make([]byte, 0, len(plain)+Overhead)
	b.SetBytes(int64(len(plain)))
	for b.Loop() {
		dst = k.Seal(dst[:0], plain, []byte("ad"))
	}
}

func BenchmarkDerive(b *testing.B) {
	for b.Loop() {
		derive(b, tk, "sk-alice")
	}
}
