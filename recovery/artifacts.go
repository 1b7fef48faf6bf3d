package recovery

import (
	"context"
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/compiler"
)

// Artifacts is what recovery reads: the vault, seen by tenant. *vault.Store
// implements it (Get in vault/artifacts.go, Resolve and Search in
// vault/search.go). No method counts as a sighting.
type Artifacts interface {
	// Get returns tenant's artifact d exactly as stored (vault.Backend.Get).
	Get(ctx context.Context, tenant string, d compiler.Digest) (compiler.Artifact, bool, error)
	// Resolve maps a public artifact id (compiler.ArtifactID) of tenant to
	// its digest; a malformed or unknown id is not found.
	Resolve(ctx context.Context, tenant, id string) (compiler.Digest, bool, error)
	// Search returns up to limit of tenant's artifacts whose text or tool
	// name contains query, ignoring case, newest first. Hits carry Digest,
	// Tool and Chars only.
	Search(ctx context.Context, tenant, query string, limit int) ([]compiler.Artifact, error)
}

// Defaults of Config.
const (
	DefaultPath             = "/token-terminator/"
	DefaultMaxPageChars     = 20000
	DefaultMaxSearchResults = 50
	DefaultMaxRounds        = 3
	DefaultMaxCalls         = 8
	// DefaultPageChars is the page size when a caller gives no limit.
	DefaultPageChars = 8000
	// DefaultSearchResults is the result count when a caller gives no limit.
	DefaultSearchResults = 10
)

// Config configures the artifact API, the recovery tool and the loop. Zero
// fields take the defaults.
type Config struct {
	// Path is the recovery_path the API is served under; it ends in '/'.
	Path string
	// MaxPageChars caps the characters of one page (max_page_chars).
	MaxPageChars int
	// MaxSearchResults caps the hits of one search (max_search_results).
	MaxSearchResults int
	// MaxRounds caps the follow-up requests one client request may cause
	// (max_recovery_rounds).
	MaxRounds int
	// MaxCalls caps the tool calls answered in one round
	// (max_recovery_calls); the model's calls past it get an error result
	// without touching the vault.
	MaxCalls int
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Path == "" {
		c.Path = DefaultPath
	}
	if !strings.HasSuffix(c.Path, "/") {
		c.Path += "/" // "/tt" serves /tt/artifacts, not /ttartifacts
	}
	if c.MaxPageChars <= 0 {
		c.MaxPageChars = DefaultMaxPageChars
	}
	if c.MaxSearchResults <= 0 {
		c.MaxSearchResults = DefaultMaxSearchResults
	}
	if c.MaxRounds <= 0 {
		c.MaxRounds = DefaultMaxRounds
	}
	if c.MaxCalls <= 0 {
		c.MaxCalls = DefaultMaxCalls
	}
	return c
}
