package badgervault

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// keyHMAC is where a Badger vault keeps its random tenant key. Tenant ids
// computed under it before the gateway learnt to take an operator's key
// must stay the same, so the record and its construction do not change.
const keyHMAC = "s/hmac"

// loadHMACKey reads the tenant key, creating and syncing it on first open.
func (s *Store) loadHMACKey() error {
	err := s.update(context.Background(), func(txn *badger.Txn) error {
		item, err := txn.Get([]byte(keyHMAC))
		if err == nil {
			s.hmacKey, err = item.ValueCopy(nil)
			return err
		}
		if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return err
		}
		s.hmacKey = key
		return txn.Set([]byte(keyHMAC), key)
	})
	if err == nil && len(s.hmacKey) != 32 {
		err = fmt.Errorf("bad key length %d", len(s.hmacKey))
	}
	if err == nil {
		err = s.db.Sync()
	}
	if err != nil {
		return fmt.Errorf("vault: hmac key: %w", err)
	}
	return nil
}

// TenantKey returns the vault's persistent random tenant key (32 bytes). It
// is created and synced when the vault is first opened, so every later open
// of the same directory returns the same key.
func (s *Store) TenantKey(context.Context) ([]byte, error) {
	done, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer done()
	return append([]byte(nil), s.hmacKey...), nil
}

// Tenant maps a credential to its opaque tenant id: the first 32 hex chars of
// HMAC-SHA-256 under the vault's own key, so ids are stable across restarts
// of one vault but useless for guessing credentials. "" is "anonymous".
//
// The gateway hashes tenants itself (its key may be the operator's, not the
// vault's); this stays for the vault's own tests, and caddymodule's
// TestTenantIDMatchesVault pins the two constructions together.
func (s *Store) Tenant(credential string) string {
	if credential == "" {
		return "anonymous"
	}
	m := hmac.New(sha256.New, s.hmacKey)
	m.Write([]byte(credential))
	return hex.EncodeToString(m.Sum(nil))[:32]
}

var _ vault.Backend = (*Store)(nil)
