package badgervault

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Verified tenants: a tenant gets vault state only after the provider has
// answered one of its requests with a 2xx (the gateway calls VerifyTenant
// then). A record lives for Retention after its last verification, so the
// set is bounded by the new-tenant rate times Retention:
//
//	v/<tenant>   8-byte big-endian unix ms of the last verification, TTL Retention
//
// The records are small and kept apart from the artifact capacity, like
// the ledger's.

func verifiedTenantKey(tenant string) []byte { return append([]byte("v/"), tenant...) }

// newTenantRate counts the tenants added in the current minute. A Badger
// vault is open in one process only, so the count is the fleet's.
type newTenantRate struct {
	mu     sync.Mutex
	minute int64
	n      int
}

// take counts one new tenant at now when fewer than max were counted in
// its minute; max <= 0 means no cap.
func (r *newTenantRate) take(now time.Time, max int) bool {
	if max <= 0 {
		return true
	}
	m := now.Unix() / 60
	r.mu.Lock()
	defer r.mu.Unlock()
	if m != r.minute {
		r.minute, r.n = m, 0
	}
	if r.n >= max {
		return false
	}
	r.n++
	return true
}

// VerifyTenant records that the provider accepted one of tenant's requests.
// A tenant already verified is refreshed (its record lives Retention
// longer) and true is returned. A new tenant is added only while fewer than
// maxNew tenants were added in the current minute (maxNew <= 0: no cap);
// otherwise nothing is written and false is returned.
func (s *Store) VerifyTenant(ctx context.Context, tenant string, maxNew int) (bool, error) {
	if tenant == "" {
		return false, errors.New("vault: verify: empty tenant")
	}
	release, err := s.enter()
	if err != nil {
		return false, err
	}
	defer release()
	known, err := s.tenantVerified(tenant)
	if err != nil {
		return false, err
	}
	now := s.now()
	if !known && !s.newTenants.take(now, maxNew) {
		return false, nil
	}
	val := binary.BigEndian.AppendUint64(nil, uint64(now.UnixMilli()))
	err = s.update(ctx, func(txn *badger.Txn) error {
		return txn.SetEntry(badger.NewEntry(verifiedTenantKey(tenant), val).WithTTL(s.retention))
	})
	if err == nil {
		err = s.db.Sync() // survives a crash as well as a restart
	}
	if err != nil {
		return false, fmt.Errorf("vault: verify: %w", err)
	}
	return true, nil
}

// TenantVerified reports whether tenant is verified.
func (s *Store) TenantVerified(ctx context.Context, tenant string) (bool, error) {
	release, err := s.enter()
	if err != nil {
		return false, err
	}
	defer release()
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return s.tenantVerified(tenant)
}

func (s *Store) tenantVerified(tenant string) (bool, error) {
	if tenant == "" {
		return false, nil
	}
	found := false
	err := s.db.View(func(txn *badger.Txn) error {
		_, err := txn.Get(verifiedTenantKey(tenant))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		found = err == nil
		return err
	})
	if err != nil {
		return false, fmt.Errorf("vault: verified: %w", err)
	}
	return found, nil
}

// RevokeTenant removes tenant from the verified set: the provider refused
// its credential. Its stored state stays, unreachable through the gateway,
// until the tenant is verified again or the state is evicted.
func (s *Store) RevokeTenant(ctx context.Context, tenant string) error {
	release, err := s.enter()
	if err != nil {
		return err
	}
	defer release()
	err = s.update(ctx, func(txn *badger.Txn) error { return txn.Delete(verifiedTenantKey(tenant)) })
	if err == nil {
		err = s.db.Sync()
	}
	if err != nil {
		return fmt.Errorf("vault: revoke: %w", err)
	}
	return nil
}
