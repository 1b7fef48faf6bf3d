// Package memvault is an in-memory artifact store with the vault's
// semantics, without capacity, retention or persistence. The gateway's
// start-up warm-up compiles into one that is thrown away afterwards (so no
// tenant state is written); tests use it as a vault that needs no disk.
package memvault

import (
	"context"
	"crypto/rand"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// Store is an in-memory artifact.Store with the same semantics as the
// vault; it is also a vault.Backend (Get, TenantKey, Close) and
// passes the conformance suite of vault/storetest, without capacity,
// retention or persistence. Fail, when set, makes every call return that
// error.
type Store struct {
	mu        sync.Mutex
	arts      map[string]artifact.Artifact // tenant + digest
	nodes     map[string]artifact.Record   // scope + chain end
	key       []byte                       // tenant key, created on first use
	verified  map[string]bool              // verified tenants (no rate cap, no expiry)
	closed    bool
	Fail      error
	Persisted int // artifacts written (not merely verified)
}

// errClosed is returned by every call after Close.
var errClosed = errors.New("memvault: closed")

// failure is the error every call returns now, if any. m.mu is held.
func (m *Store) failure() error {
	if m.closed {
		return errClosed
	}
	return m.Fail
}

// New returns an empty Store.
func New() *Store {
	return &Store{arts: map[string]artifact.Artifact{}, nodes: map[string]artifact.Record{}}
}

func scopeKey(s artifact.Scope, d artifact.Digest) string {
	return s.Tenant + "\x00" + s.Session + "\x00" + string(d[:])
}

func artKey(tenant string, d artifact.Digest) string { return tenant + "\x00" + string(d[:]) }

// Ancestor implements artifact.Store.
func (m *Store) Ancestor(_ context.Context, s artifact.Scope, chain []artifact.Digest) (artifact.Lineage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.failure(); err != nil {
		return artifact.Lineage{}, err
	}
	for i := len(chain) - 2; i >= 0; i-- {
		if r, ok := m.nodes[scopeKey(s, chain[i])]; ok {
			return artifact.Lineage{Found: true, Ancestor: chain[i], Length: i + 1, Exposures: maps.Clone(r.Exposures), Cache: slices.Clone(r.Cache)}, nil
		}
	}
	return artifact.Lineage{}, nil
}

// Missing implements artifact.Store.
func (m *Store) Missing(_ context.Context, s artifact.Scope, ds []artifact.Digest) ([]artifact.Digest, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.failure(); err != nil {
		return nil, err
	}
	var out []artifact.Digest
	for _, d := range ds {
		if _, ok := m.arts[artKey(s.Tenant, d)]; !ok {
			out = append(out, d)
		}
	}
	return out, nil
}

// Persist implements artifact.Store.
func (m *Store) Persist(_ context.Context, s artifact.Scope, arts []artifact.Artifact) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.failure(); err != nil {
		return err
	}
	for _, a := range arts {
		k := artKey(s.Tenant, a.Digest)
		if _, ok := m.arts[k]; !ok {
			if artifact.DigestOf(a.Text, a.Raw) != a.Digest {
				return errors.New("memstore: digest mismatch")
			}
			a.Raw, a.Text = append([]byte(nil), a.Raw...), strings.Clone(a.Text) // both may share the body
			m.arts[k] = a
			m.Persisted++
		}
	}
	return nil
}

// Record implements artifact.Store.
func (m *Store) Record(_ context.Context, s artifact.Scope, r artifact.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.failure(); err != nil {
		return err
	}
	r.Exposures, r.Cache = maps.Clone(r.Exposures), slices.Clone(r.Cache)
	m.nodes[scopeKey(s, r.ChainEnd)] = r
	return nil
}

// Get returns a stored artifact of a tenant (vault.Backend).
func (m *Store) Get(_ context.Context, tenant string, d artifact.Digest) (artifact.Artifact, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.failure(); err != nil {
		return artifact.Artifact{}, false, err
	}
	a, ok := m.arts[artKey(tenant, d)]
	return a, ok, nil
}

// TenantKey returns the store's random 32-byte tenant key (vault.Backend).
func (m *Store) TenantKey(context.Context) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.failure(); err != nil {
		return nil, err
	}
	if m.key == nil {
		m.key = make([]byte, 32)
		rand.Read(m.key)
	}
	return append([]byte(nil), m.key...), nil
}

// Close makes every later call fail (vault.Backend).
func (m *Store) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

// Len returns the number of stored artifacts.
func (m *Store) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.arts)
}

// All returns the artifacts of a tenant.
func (m *Store) All(tenant string) []artifact.Artifact {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []artifact.Artifact
	for k, a := range m.arts {
		if len(k) > len(tenant) && k[:len(tenant)+1] == tenant+"\x00" {
			out = append(out, a)
		}
	}
	return out
}

// VerifyTenant adds tenant to the verified set (vault.Backend). The
// in-memory store applies no new-tenant cap.
func (m *Store) VerifyTenant(_ context.Context, tenant string, _ int) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.failure(); err != nil {
		return false, err
	}
	if tenant == "" {
		return false, errors.New("memstore: verify: empty tenant")
	}
	if m.verified == nil {
		m.verified = map[string]bool{}
	}
	m.verified[tenant] = true
	return true, nil
}

// TenantVerified reports whether tenant is verified (vault.Backend).
func (m *Store) TenantVerified(_ context.Context, tenant string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.failure(); err != nil {
		return false, err
	}
	return m.verified[tenant], nil
}

// RevokeTenant removes tenant from the verified set (vault.Backend).
func (m *Store) RevokeTenant(_ context.Context, tenant string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.failure(); err != nil {
		return err
	}
	delete(m.verified, tenant)
	return nil
}
