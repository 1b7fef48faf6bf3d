package vault

import (
	"context"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// Backend is a vault the gateway can run on: the compiler's Store plus what
// the gateway itself needs around it. Every backend (Badger here, Redis for
// a fleet) implements it and passes the same conformance suite.
type Backend interface {
	artifact.Store
	// Get returns tenant's artifact d exactly as stored (Text, Raw, Chars;
	// Tool when the backend keeps it), for recovery and tests. It is not a
	// sighting: it neither extends retention nor counts as a use. A record
	// that fails its checksum or digest is an error, never returned.
	Get(ctx context.Context, tenant string, d artifact.Digest) (artifact.Artifact, bool, error)
	// TenantKey returns the backend's persistent random tenant key (32
	// bytes), creating it on first call. Gateways that share a backend
	// share the key, so they compute the same tenants; an operator's
	// tenant_key setting overrides it.
	TenantKey(ctx context.Context) ([]byte, error)
	// VerifyTenant records that the provider answered one of tenant's
	// requests with a 2xx, so tenant may hold state. The verified set is
	// persistent and shared by every gateway on the backend. A tenant
	// already verified is refreshed and true is returned; a new one is
	// added only while fewer than maxNew tenants were added in the current
	// minute (maxNew <= 0: no cap), else false. A record lives Retention
	// after its last verification.
	VerifyTenant(ctx context.Context, tenant string, maxNew int) (bool, error)
	// TenantVerified reports whether tenant is in the verified set.
	TenantVerified(ctx context.Context, tenant string) (bool, error)
	// RevokeTenant removes tenant from the verified set (the provider
	// refused its credential); what it stored stays, unreachable, until it
	// is verified again or evicted.
	RevokeTenant(ctx context.Context, tenant string) error
	// Close releases the backend. Operations after Close fail.
	Close() error
}
