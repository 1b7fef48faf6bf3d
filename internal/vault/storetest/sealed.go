package storetest

import (
	"context"
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/seal"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// Sealed returns open with encryption at rest on: every call reaches the
// backend with the data keys of its tenant in its context, as the gateway
// passes them (each tenant's secret is its name under a fixed test tenant
// key). Run(t, Sealed(open), ...) holds a backend to every rule with its
// content sealed.
func Sealed(open Opener) Opener {
	return func(t *testing.T, cfg Config) vault.Backend {
		b := open(t, cfg)
		s := &sealed{Backend: b}
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
}

func (s *sealed) ctx(ctx context.Context, tenant string) context.Context {
	return seal.NewContext(ctx, SealKeys(tenant))
}

func (s *sealed) Ancestor(ctx context.Context, sc compiler.Scope, chain []compiler.Digest) (compiler.Lineage, error) {
	return s.Backend.Ancestor(s.ctx(ctx, sc.Tenant), sc, chain)
}

func (s *sealed) Missing(ctx context.Context, sc compiler.Scope, ds []compiler.Digest) ([]compiler.Digest, error) {
	return s.Backend.Missing(s.ctx(ctx, sc.Tenant), sc, ds)
}

func (s *sealed) Persist(ctx context.Context, sc compiler.Scope, arts []compiler.Artifact) error {
	return s.Backend.Persist(s.ctx(ctx, sc.Tenant), sc, arts)
}

func (s *sealed) Record(ctx context.Context, sc compiler.Scope, rec compiler.Record) error {
	return s.Backend.Record(s.ctx(ctx, sc.Tenant), sc, rec)
}

func (s *sealed) Get(ctx context.Context, tenant string, d compiler.Digest) (compiler.Artifact, bool, error) {
	return s.Backend.Get(s.ctx(ctx, tenant), tenant, d)
}

type sealedReader struct {
	*sealed
	r Reader
}

func (s *sealedReader) Resolve(ctx context.Context, tenant, id string) (compiler.Digest, bool, error) {
	return s.r.Resolve(s.ctx(ctx, tenant), tenant, id)
}

func (s *sealedReader) Search(ctx context.Context, tenant, query string, limit int) ([]compiler.Artifact, error) {
	return s.r.Search(s.ctx(ctx, tenant), tenant, query, limit)
}
