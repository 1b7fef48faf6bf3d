package redisvault

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Verified tenants (vault.Backend): one key per tenant in its own slot,
// and a per-minute count of new tenants in {global}, shared by the fleet.
// The count and the tenant's key live in different slots, so they are two
// steps, not one script: two stores verifying the same new tenant at once
// may both count it, which only makes the cap stricter.

// VerifyTenant records that the provider accepted one of tenant's requests.
// A tenant already verified is refreshed (its key lives Retention longer)
// and true is returned. A new tenant is added only while fewer than maxNew
// tenants were added in the current minute by any store of the fleet
// (maxNew <= 0: no cap); otherwise false.
func (s *Store) VerifyTenant(ctx context.Context, tenant string, maxNew int) (bool, error) {
	if tenant == "" {
		return false, errors.New("redisvault: verify: empty tenant")
	}
	ctx, done, err := s.call(ctx)
	if err != nil {
		return false, err
	}
	defer done()
	key := s.k.tenant(tenant).verified
	now := s.nowMS()
	// Refresh a known tenant in one step (XX: only if it exists).
	ok, err := s.rdb.SetXX(ctx, key, now, s.retention).Result()
	if err != nil {
		return false, fmt.Errorf("redisvault: verify: %w", err)
	}
	if ok {
		return true, nil
	}
	if maxNew > 0 {
		minute := s.k.global("newtenants:" + strconv.FormatInt(now/60000, 10))
		var n *redis.IntCmd
		if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			n = p.Incr(ctx, minute)
			p.PExpire(ctx, minute, 2*time.Minute)
			return nil
		}); err != nil {
			return false, fmt.Errorf("redisvault: verify: %w", err)
		}
		if n.Val() > int64(maxNew) {
			return false, nil
		}
	}
	if err := s.rdb.Set(ctx, key, now, s.retention).Err(); err != nil {
		return false, fmt.Errorf("redisvault: verify: %w", err)
	}
	return true, nil
}

// TenantVerified reports whether tenant is verified.
func (s *Store) TenantVerified(ctx context.Context, tenant string) (bool, error) {
	if tenant == "" {
		return false, nil
	}
	ctx, done, err := s.call(ctx)
	if err != nil {
		return false, err
	}
	defer done()
	n, err := s.rdb.Exists(ctx, s.k.tenant(tenant).verified).Result()
	if err != nil {
		return false, fmt.Errorf("redisvault: verified: %w", err)
	}
	return n == 1, nil
}

// RevokeTenant removes tenant from the verified set: the provider refused
// its credential. Its stored state stays, unreachable through the gateway,
// until it is verified again or evicted.
func (s *Store) RevokeTenant(ctx context.Context, tenant string) error {
	ctx, done, err := s.call(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := s.rdb.Del(ctx, s.k.tenant(tenant).verified).Err(); err != nil {
		return fmt.Errorf("redisvault: revoke: %w", err)
	}
	return nil
}
