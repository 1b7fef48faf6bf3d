//go:build ttstub

// TEMPORARY: in-memory stand-ins used only while the vault and tokens
// packages are being written (go test -tags ttstub). Delete when they build.

package caddymodule

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"github.com/caddyserver/caddy/v2"

	"github.com/tokenterminator/caddy-token-terminator/compiler"
)

type stubStore struct{}

func (stubStore) Ancestor(context.Context, compiler.Scope, []compiler.Digest) (compiler.Lineage, error) {
	return compiler.Lineage{}, nil
}
func (stubStore) Persist(context.Context, compiler.Scope, []compiler.Artifact) error { return nil }
func (stubStore) Record(context.Context, compiler.Scope, compiler.Record) error      { return nil }
func (stubStore) Tenant(c string) string {
	if c == "" {
		return ""
	}
	s := sha256.Sum256([]byte(c))
	return hex.EncodeToString(s[:8])
}

type stubHandle struct{ stubStore }

func (stubHandle) Destruct() error { return nil }

func (h *Handler) acquireVault(dir string) (vaultStore, error) {
	val, _, err := vaults.LoadOrNew(dir, func() (caddy.Destructor, error) { return stubHandle{}, nil })
	if err != nil {
		return nil, err
	}
	h.vaultKey = dir
	return val.(stubHandle).stubStore, nil
}

func (h *Handler) acquireCounter() (compiler.TokenCounter, error) { return nil, nil }
