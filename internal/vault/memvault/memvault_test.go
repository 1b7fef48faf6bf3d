package memvault_test

import (
	"testing"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/memvault"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault/storetest"
)

var _ vault.Backend = (*memvault.Store)(nil)

// The in-memory store keeps the Store contract of the real backends; it has
// no capacity, retention or persistence.
func TestMemStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, _ storetest.Config) vault.Backend {
		return memvault.New()
	})
}
