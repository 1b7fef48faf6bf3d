package recovery

import (
	"context"
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// Artifacts is what recovery reads: the vault, seen by tenant. *badgervault.Store
// implements it (Get in vault/badgervault/artifacts.go, Resolve and Search in
// vault/badgervault/search.go). No method counts as a sighting.
type Artifacts interface {
	// Get returns tenant's artifact d exactly as stored (vault.Backend.Get).
	Get(ctx context.Context, tenant string, d artifact.Digest) (artifact.Artifact, bool, error)
	// Resolve maps a public artifact id (artifact.ID) of tenant to
	// its digest; a malformed or unknown id is not found.
	Resolve(ctx context.Context, tenant, id string) (artifact.Digest, bool, error)
	// Search returns up to limit of tenant's artifacts whose text or tool
	// name contains query, ignoring case, newest first. Hits carry Digest,
	// Tool and Chars only.
	Search(ctx context.Context, tenant, query string, limit int) ([]artifact.Artifact, error)
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

// maxWithinScanBytes bounds the artifact text one search of Within reads.
const maxWithinScanBytes = 64 << 20

// Within returns arts restricted to the artifacts of reachable: any other
// id is not found, exactly as an unknown one, and Search looks only at
// them, in reachable's order (the first reachable.Search hits first). It
// is what the model's recovery tool reads: the artifacts its own
// conversation's forwarded requests named or carried
// (the compiler's Result.Reachable), never the rest of the tenant. A search
// reads at most maxWithinScanBytes of text.
func Within(arts Artifacts, reachable []artifact.Digest) Artifacts {
	w := &within{arts: arts, ids: make(map[string]artifact.Digest, len(reachable)), order: make([]artifact.Digest, 0, len(reachable))}
	for _, d := range reachable {
		id := artifact.ID(d)
		if _, dup := w.ids[id]; !dup {
			w.ids[id] = d
			w.order = append(w.order, d)
		}
	}
	return w
}

type within struct {
	arts  Artifacts
	ids   map[string]artifact.Digest // public id -> digest
	order []artifact.Digest
}

func (w *within) has(d artifact.Digest) bool {
	got, ok := w.ids[artifact.ID(d)]
	return ok && got == d
}

func (w *within) Get(ctx context.Context, tenant string, d artifact.Digest) (artifact.Artifact, bool, error) {
	if !w.has(d) {
		return artifact.Artifact{}, false, nil
	}
	return w.arts.Get(ctx, tenant, d)
}

func (w *within) Resolve(ctx context.Context, tenant, id string) (artifact.Digest, bool, error) {
	d, ok := w.ids[id]
	if !ok {
		return artifact.Digest{}, false, nil
	}
	if err := ctx.Err(); err != nil {
		return artifact.Digest{}, false, err
	}
	return d, true, nil
}

// Search matches query as the vault does (vault.SearchScan: the tool name
// or the text contains it, ignoring case, in time linear in the text, the
// caller's context looked at inside the scan); an empty query matches
// every artifact.
func (w *within) Search(ctx context.Context, tenant, query string, limit int) ([]artifact.Artifact, error) {
	scan, err := vault.NewSearchScan(ctx, query)
	if err != nil {
		return nil, err
	}
	var out []artifact.Artifact
	scanned := 0
	for _, d := range w.order {
		if len(out) >= limit || scanned >= maxWithinScanBytes {
			break
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		a, ok, err := w.arts.Get(ctx, tenant, d)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // evicted
		}
		scanned += len(a.Text)
		match, err := scan.Match([]byte(a.Text), a.Tool)
		if err != nil {
			return nil, err
		}
		if match {
			out = append(out, artifact.Artifact{Digest: d, Tool: a.Tool, Chars: a.Chars})
		}
	}
	return out, nil
}
