package vault

import (
	"bytes"
	"context"
)

// TenantKey returns the vault's persistent random tenant key (created on
// first Open), so that Store is a Backend.
func (s *Store) TenantKey(ctx context.Context) ([]byte, error) {
	release, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer release()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return bytes.Clone(s.hmacKey), nil
}

var _ Backend = (*Store)(nil)
