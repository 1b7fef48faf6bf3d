// Package compilertest holds test helpers for the compiler that need the
// testing package or the compiler: the in-memory Store under its test name,
// the shared 1 MB benchmark and the corpus loader for tests. The request
// generators are in internal/fixtures, under one name.
package compilertest

import "github.com/tokenterminator/caddy-token-terminator/internal/vault/memvault"

// MemStore is the in-memory store of internal/vault/memvault, under the
// name the compiler's tests use.
type MemStore = memvault.Store

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return memvault.New() }
