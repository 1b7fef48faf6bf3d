package recovery

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
)

// memArtifacts adapts compilertest.MemStore to Artifacts for these tests:
// it remembers the order artifacts were put in (newest first for Search),
// which MemStore does not keep.
type memArtifacts struct {
	store *compilertest.MemStore
	order map[string][]compiler.Digest // tenant -> digests, oldest first
	fail  error
}

func newMem() *memArtifacts {
	return &memArtifacts{store: compilertest.NewMemStore(), order: map[string][]compiler.Digest{}}
}

func (m *memArtifacts) put(t testing.TB, tenant, tool, text string) compiler.Artifact {
	t.Helper()
	raw, _ := json.Marshal(text)
	a := compiler.Artifact{Digest: compiler.ArtifactDigest(text, raw), Text: text, Raw: raw, Tool: tool, Chars: utf8.RuneCountInString(text)}
	if err := m.store.Persist(context.Background(), compiler.Scope{Tenant: tenant}, []compiler.Artifact{a}); err != nil {
		t.Fatal(err)
	}
	m.order[tenant] = append(m.order[tenant], a.Digest)
	return a
}

func (m *memArtifacts) Get(_ context.Context, tenant string, d compiler.Digest) (compiler.Artifact, bool, error) {
	if m.fail != nil {
		return compiler.Artifact{}, false, m.fail
	}
	return m.store.Get(context.Background(), tenant, d)
}

func (m *memArtifacts) Resolve(_ context.Context, tenant, id string) (compiler.Digest, bool, error) {
	if m.fail != nil {
		return compiler.Digest{}, false, m.fail
	}
	for _, d := range m.order[tenant] {
		if compiler.ArtifactID(d) == id {
			return d, true, nil
		}
	}
	for _, a := range m.store.All(tenant) { // stored by a compiler, not by put
		if compiler.ArtifactID(a.Digest) == id {
			return a.Digest, true, nil
		}
	}
	return compiler.Digest{}, false, nil
}

func (m *memArtifacts) Search(_ context.Context, tenant, query string, limit int) ([]compiler.Artifact, error) {
	if m.fail != nil {
		return nil, m.fail
	}
	var out []compiler.Artifact
	q := strings.ToLower(query)
	for _, d := range slices.Backward(m.order[tenant]) {
		a, _, _ := m.store.Get(context.Background(), tenant, d)
		if strings.Contains(strings.ToLower(a.Text), q) || strings.Contains(strings.ToLower(a.Tool), q) {
			out = append(out, compiler.Artifact{Digest: a.Digest, Tool: a.Tool, Chars: a.Chars})
		}
		if len(out) == limit {
			break
		}
	}
	return out, nil
}
