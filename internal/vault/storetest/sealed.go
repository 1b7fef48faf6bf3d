package storetest

import (
	"context"
	"encoding/hex"
	"sync"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/seal"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// Sealed returns open with encryption at rest on, as the gateway runs it:
// every call reaches the backend with the data keys of its tenant in its
// context (each tenant's secret is its name under a fixed test tenant key),
// and artifacts are filed under their keyed identities (seal.Keys.ID), as
// the compiler names them with compiler.Request.KeyID. The cases keep
// speaking content identities: the wrapper maps them to keyed ones on the
// way in and back on the way out. Run(t, Sealed(open), ...) holds a backend
// to every rule with its content sealed and its ids keyed.
func Sealed(open Opener) Opener {
	return func(t *testing.T, cfg Config) vault.Backend {
		b := open(t, cfg)
		s := &sealed{Backend: b, plain: map[artifact.Digest]artifact.Digest{}, byID: map[string]artifact.Digest{}}
		if r, ok := b.(Reader); ok {
			return &sealedReader{sealed: s, r: r}
		}
		return s
	}
}

// SealKeys returns the keys Sealed uses for tenant.
func SealKeys(tenant string) *seal.Keys {
	k, err := seal.Derive([]byte("storetest tenant key, 32 bytes.."), "secret of "+tenant)
	if err != nil {
		panic(err)
	}
	return k
}

type sealed struct {
	vault.Backend
	mu    sync.Mutex
	plain map[artifact.Digest]artifact.Digest // keyed -> content identity
	byID  map[string]artifact.Digest          // tenant + content id -> keyed
}

func (s *sealed) ctx(ctx context.Context, tenant string) context.Context {
	return seal.NewContext(ctx, SealKeys(tenant))
}

// key maps tenant's content identity d to its keyed identity.
func (s *sealed) key(tenant string, d artifact.Digest) artifact.Digest {
	k := artifact.Digest(SealKeys(tenant).ID(d))
	s.mu.Lock()
	s.plain[k] = d
	s.byID[tenant+"\x00"+artifact.ID(d)] = k
	s.mu.Unlock()
	return k
}

// unkey maps a keyed identity back (unknown ones, e.g. lineage chain
// hashes, are returned as they are).
func (s *sealed) unkey(k artifact.Digest) artifact.Digest {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.plain[k]; ok {
		return d
	}
	return k
}

func (s *sealed) keyAll(tenant string, ds []artifact.Digest) []artifact.Digest {
	out := make([]artifact.Digest, len(ds))
	for i, d := range ds {
		out[i] = s.key(tenant, d)
	}
	return out
}

func (s *sealed) Ancestor(ctx context.Context, sc artifact.Scope, chain []artifact.Digest) (artifact.Lineage, error) {
	l, err := s.Backend.Ancestor(s.ctx(ctx, sc.Tenant), sc, chain)
	if l.Exposures != nil {
		m := make(map[artifact.Digest]int, len(l.Exposures))
		for k, n := range l.Exposures {
			m[s.unkey(k)] = n
		}
		l.Exposures = m
	}
	return l, err
}

func (s *sealed) Missing(ctx context.Context, sc artifact.Scope, ds []artifact.Digest) ([]artifact.Digest, error) {
	out, err := s.Backend.Missing(s.ctx(ctx, sc.Tenant), sc, s.keyAll(sc.Tenant, ds))
	for i, k := range out {
		out[i] = s.unkey(k)
	}
	return out, err
}

func (s *sealed) Persist(ctx context.Context, sc artifact.Scope, arts []artifact.Artifact) error {
	keyed := make([]artifact.Artifact, len(arts))
	for i, a := range arts {
		a.Digest = s.key(sc.Tenant, a.Digest)
		keyed[i] = a
	}
	return s.Backend.Persist(s.ctx(ctx, sc.Tenant), sc, keyed)
}

func (s *sealed) Record(ctx context.Context, sc artifact.Scope, rec artifact.Record) error {
	if rec.Exposures != nil {
		m := make(map[artifact.Digest]int, len(rec.Exposures))
		for d, n := range rec.Exposures {
			m[s.key(sc.Tenant, d)] = n
		}
		rec.Exposures = m
	}
	rec.Referenced = s.keyAll(sc.Tenant, rec.Referenced)
	return s.Backend.Record(s.ctx(ctx, sc.Tenant), sc, rec)
}

func (s *sealed) Get(ctx context.Context, tenant string, d artifact.Digest) (artifact.Artifact, bool, error) {
	a, ok, err := s.Backend.Get(s.ctx(ctx, tenant), tenant, s.key(tenant, d))
	a.Digest = s.unkey(a.Digest)
	return a, ok, err
}

type sealedReader struct {
	*sealed
	r Reader
}

// Resolve resolves the keyed id of the content id asked for; an id the
// wrapper never keyed (malformed, unknown) is passed on as it is.
func (s *sealedReader) Resolve(ctx context.Context, tenant, id string) (artifact.Digest, bool, error) {
	s.mu.Lock()
	k, ok := s.byID[tenant+"\x00"+id]
	s.mu.Unlock()
	if ok {
		id = "a_" + hex.EncodeToString(k[:16])
	}
	d, found, err := s.r.Resolve(s.ctx(ctx, tenant), tenant, id)
	return s.unkey(d), found, err
}

func (s *sealedReader) Search(ctx context.Context, tenant, query string, limit int) ([]artifact.Artifact, error) {
	out, err := s.r.Search(s.ctx(ctx, tenant), tenant, query, limit)
	for i := range out {
		out[i].Digest = s.unkey(out[i].Digest)
	}
	return out, err
}
