package recovery

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/compilertest"
)

// memArtifacts adapts compilertest.MemStore to Artifacts for these tests:
// it remembers the order artifacts were put in (newest first for Search),
// which MemStore does not keep.
type memArtifacts struct {
	store *compilertest.MemStore
	order map[string][]artifact.Digest // tenant -> digests, oldest first
	fail  error
}

func newMem() *memArtifacts {
	return &memArtifacts{store: compilertest.NewMemStore(), order: map[string][]artifact.Digest{}}
}

func (m *memArtifacts) put(t testing.TB, tenant, tool, text string) artifact.Artifact {
	t.Helper()
	raw, _ := json.Marshal(text)
	a := artifact.Artifact{Digest: artifact.DigestOf(text, raw), Text: text, Raw: raw, Tool: tool, Chars: utf8.RuneCountInString(text)}
	if err := m.store.Persist(context.Background(), artifact.Scope{Tenant: tenant}, []artifact.Artifact{a}); err != nil {
		t.Fatal(err)
	}
	m.order[tenant] = append(m.order[tenant], a.Digest)
	return a
}

func (m *memArtifacts) Get(_ context.Context, tenant string, d artifact.Digest) (artifact.Artifact, bool, error) {
	if m.fail != nil {
		return artifact.Artifact{}, false, m.fail
	}
	return m.store.Get(context.Background(), tenant, d)
}

func (m *memArtifacts) Resolve(_ context.Context, tenant, id string) (artifact.Digest, bool, error) {
	if m.fail != nil {
		return artifact.Digest{}, false, m.fail
	}
	for _, d := range m.order[tenant] {
		if artifact.ID(d) == id {
			return d, true, nil
		}
	}
	for _, a := range m.store.All(tenant) { // stored by a compiler, not by put
		if artifact.ID(a.Digest) == id {
			return a.Digest, true, nil
		}
	}
	return artifact.Digest{}, false, nil
}

func (m *memArtifacts) Search(_ context.Context, tenant, query string, limit int) ([]artifact.Artifact, error) {
	if m.fail != nil {
		return nil, m.fail
	}
	var out []artifact.Artifact
	q := strings.ToLower(query)
	for _, d := range slices.Backward(m.order[tenant]) {
		a, _, _ := m.store.Get(context.Background(), tenant, d)
		if strings.Contains(strings.ToLower(a.Text), q) || strings.Contains(strings.ToLower(a.Tool), q) {
			out = append(out, artifact.Artifact{Digest: a.Digest, Tool: a.Tool, Chars: a.Chars})
		}
		if len(out) == limit {
			break
		}
	}
	return out, nil
}
