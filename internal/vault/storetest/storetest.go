// Package storetest is the conformance suite every vault backend passes: the
// in-memory store (vault/memvault), Badger (package vault) and Redis
// (vault/redisvault). A backend's test calls Run with a function that opens a
// fresh store for the given Config and declares, as Capability values, which
// optional rules it implements; a case needing an undeclared capability is
// skipped with a message naming it, never silently.
package storetest

import (
	"testing"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// Config carries the knobs the cases need. Zero fields mean the backend's
// default.
type Config struct {
	// MaxBytes caps the stored Text+Raw bytes of all tenants.
	MaxBytes int64
	// TenantMaxBytes caps one tenant's Text+Raw bytes. Cases about the
	// global rule set it equal to MaxBytes, so that a backend whose default
	// is a fraction of MaxBytes applies no per-tenant limit there.
	TenantMaxBytes int64
	// Retention is the lineage TTL and the window in which a seen artifact
	// is never evicted.
	Retention time.Duration
	// Now is the clock for last-seen times and the retention window (not
	// for lineage TTLs, which backends may leave to their engine's wall
	// clock). Nil means time.Now.
	Now func() time.Time
}

// Capability names an optional rule a backend implements.
type Capability string

const (
	// Capacity: MaxBytes, Retention and Now are honoured; a full store
	// evicts least recently seen artifacts outside retention, and
	// otherwise fails with an error that errors.Is artifact.ErrFull.
	Capacity Capability = "capacity"
	// TenantQuota: TenantMaxBytes is honoured; a tenant over it evicts its
	// own least recently seen artifacts outside retention, then gets
	// artifact.ErrFull, and other tenants are unaffected.
	TenantQuota Capability = "tenant quota"
	// LineageTTL: lineage nodes expire after Retention (wall clock).
	LineageTTL Capability = "lineage TTL"
	// Persistent: within one test, opening again (after Close) with the
	// same Config reaches the same storage: artifacts, lineage and the
	// tenant key survive.
	Persistent Capability = "persistent"
	// Recovery: the backend implements Reader (Resolve and Search, what
	// recovery reads) with the rules of Badger's vault/search.go.
	Recovery Capability = "recovery"
	// TenantRate: VerifyTenant's cap on new tenants per minute is kept,
	// counted in minutes of Now's clock.
	TenantRate Capability = "tenant rate"
)

// Opener opens a fresh, empty store for one test. Called again within the
// same test it must reach the same storage when the backend declares
// Persistent. It registers its own cleanup.
type Opener func(t *testing.T, cfg Config) vault.Backend

// Run runs every case against the backend open returns.
func Run(t *testing.T, open Opener, caps ...Capability) {
	s := suite{open: open, caps: map[Capability]bool{}}
	for _, c := range caps {
		s.caps[c] = true
	}
	cases := []struct {
		name string
		need Capability
		run  func(*testing.T)
	}{
		{"PersistGet", "", s.persistGet},
		{"DigestMismatch", "", s.digestMismatch},
		{"SpellingsApart", "", s.spellingsApart},
		{"Missing", "", s.missing},
		{"TenantsApart", "", s.tenantsApart},
		{"Ancestor", "", s.ancestor},
		{"ConcurrentPersist", "", s.concurrentPersist},
		{"Closed", "", s.closed},
		{"TenantKey", "", s.tenantKey},
		{"VerifiedTenants", "", s.verifiedTenants},
		{"VerifiedSurvivesReopen", Persistent, s.verifiedReopen},
		{"NewTenantRate", TenantRate, s.newTenantRate},
		{"Reopen", Persistent, s.reopen},
		{"RetentionEviction", Capacity, s.retentionEviction},
		{"TooLarge", Capacity, s.tooLarge},
		{"TenantQuota", TenantQuota, s.tenantQuota},
		{"LineageTTL", LineageTTL, s.lineageTTL},
		{"Resolve", Recovery, s.resolve},
		{"Search", Recovery, s.search},
		{"SearchBounded", Recovery, s.searchBounded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.need != "" && !s.caps[c.need] {
				t.Skipf("backend does not declare capability %q", c.need)
			}
			c.run(t)
		})
	}
}

type suite struct {
	open Opener
	caps map[Capability]bool
}
