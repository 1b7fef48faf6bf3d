package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// clock is a settable clock for Config.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// art returns an artifact for text with provenance; Raw is its JSON string.
func art(text string) artifact.Artifact {
	raw, _ := json.Marshal(text)
	return artifact.Artifact{
		Digest: artifact.DigestOf(text, raw),
		Text:   text,
		Raw:    raw,
		Tool:   "read_file",
		Args:   `{"path":"/src/` + fmt.Sprint(len(text)) + `"}`,
		Chars:  utf8.RuneCountInString(text),
	}
}

// text returns n bytes of plain ASCII (no quotes or escapes, so Raw is n+2
// bytes) unique to seed.
func text(seed string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s line %d: the quick brown fox\n", seed, i)
	}
	return b.String()[:n]
}

func size(a artifact.Artifact) int64 { return int64(len(a.Text) + len(a.Raw)) }

func digests(arts ...artifact.Artifact) []artifact.Digest {
	out := make([]artifact.Digest, len(arts))
	for i, a := range arts {
		out[i] = a.Digest
	}
	return out
}

func persist(t *testing.T, s vault.Backend, tenant string, arts ...artifact.Artifact) {
	t.Helper()
	if err := s.Persist(context.Background(), artifact.Scope{Tenant: tenant}, arts); err != nil {
		t.Fatalf("persist for %q: %v", tenant, err)
	}
}

// has reports whether tenant's artifact a is stored, and that it is exact.
func has(t *testing.T, s vault.Backend, tenant string, a artifact.Artifact) bool {
	t.Helper()
	got, ok, err := s.Get(context.Background(), tenant, a.Digest)
	if err != nil {
		t.Fatalf("get %x: %v", a.Digest[:4], err)
	}
	if ok {
		same(t, got, a)
	}
	return ok
}

// same fails unless got is exactly want.
func same(t *testing.T, got, want artifact.Artifact) {
	t.Helper()
	if got.Digest != want.Digest || got.Text != want.Text || string(got.Raw) != string(want.Raw) ||
		got.Chars != want.Chars || got.Tool != want.Tool || got.Args != want.Args {
		t.Fatalf("artifact %x not returned exactly: text %d/%d bytes, raw %q.../%q..., chars %d/%d, tool %q/%q, args %q/%q",
			want.Digest[:4], len(got.Text), len(want.Text), head(got.Raw), head(want.Raw),
			got.Chars, want.Chars, got.Tool, want.Tool, got.Args, want.Args)
	}
}

func head(b []byte) []byte { return b[:min(len(b), 16)] }

// chain returns n distinct chain hashes for seed.
func chain(seed string, n int) []artifact.Digest {
	out := make([]artifact.Digest, n)
	for i := range out {
		out[i] = sha256.Sum256([]byte(fmt.Sprintf("%s/%d", seed, i)))
	}
	return out
}
