package caddymodule

import (
	"fmt"
	"strings"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
	"github.com/tokenterminator/caddy-token-terminator/internal/response"
)

// Recovery modes (subdirective recovery).
const (
	// RecoveryTool offers the model the token_terminator tool and answers
	// its calls; the artifact API is served too.
	RecoveryTool = "tool"
	// RecoveryAPI serves the artifact API only; receipts name its path.
	RecoveryAPI = "api"
	// RecoveryOff serves nothing and offers nothing.
	RecoveryOff = "off"

	DefaultRecovery          = RecoveryTool
	DefaultRecoveryPath      = recovery.DefaultPath
	DefaultMaxRecoveryRounds = recovery.DefaultMaxRounds
	DefaultMaxRecoveryCalls  = recovery.DefaultMaxCalls
	DefaultMaxPageChars      = recovery.DefaultMaxPageChars
	DefaultMaxSearchResults  = recovery.DefaultMaxSearchResults
)

// RecoveryConfig is the recovery part of the handler's configuration
// (embedded in Handler: its fields are the handler's own JSON keys).
type RecoveryConfig struct {
	// tool (offer the model the token_terminator tool and answer it), api
	// (serve the artifact API only) or off. Default: tool.
	Recovery string `json:"recovery,omitempty"`

	// Path prefix the artifact API is served under; requests under it are
	// never forwarded. Default: /token-terminator/.
	RecoveryPath string `json:"recovery_path,omitempty"`

	// Follow-up requests one client request may cause. Default: 3.
	MaxRecoveryRounds *int `json:"max_recovery_rounds,omitempty"`

	// Tool calls answered in one round; the model's calls past it get an
	// error result (too_many_calls) and read nothing. Default: 8.
	MaxRecoveryCalls *int `json:"max_recovery_calls,omitempty"`

	// Characters of one page the API or the tool returns. Default: 20000.
	MaxPageChars *int `json:"max_page_chars,omitempty"`

	// Results of one search. Default: 50.
	MaxSearchResults *int `json:"max_search_results,omitempty"`
}

func (c *RecoveryConfig) applyRecoveryDefaults() {
	if c.Recovery == "" {
		c.Recovery = DefaultRecovery
	}
	if c.RecoveryPath == "" {
		c.RecoveryPath = DefaultRecoveryPath
	}
	if c.MaxRecoveryRounds == nil {
		c.MaxRecoveryRounds = intp(DefaultMaxRecoveryRounds)
	}
	if c.MaxRecoveryCalls == nil {
		c.MaxRecoveryCalls = intp(DefaultMaxRecoveryCalls)
	}
	if c.MaxPageChars == nil {
		c.MaxPageChars = intp(DefaultMaxPageChars)
	}
	if c.MaxSearchResults == nil {
		c.MaxSearchResults = intp(DefaultMaxSearchResults)
	}
}

// checkRecovery validates a configuration whose defaults are applied.
func (c *RecoveryConfig) checkRecovery() error {
	switch c.Recovery {
	case RecoveryTool, RecoveryAPI, RecoveryOff:
	default:
		return fmt.Errorf("recovery must be tool, api or off, got %q", c.Recovery)
	}
	if !strings.HasPrefix(c.RecoveryPath, "/") || strings.ContainsAny(c.RecoveryPath, "?#* \t") {
		return fmt.Errorf("recovery_path must be a path starting with '/', got %q", c.RecoveryPath)
	}
	if *c.MaxRecoveryRounds < 1 {
		return fmt.Errorf("max_recovery_rounds must be at least 1, got %d", *c.MaxRecoveryRounds)
	}
	if *c.MaxRecoveryCalls < 1 {
		return fmt.Errorf("max_recovery_calls must be at least 1, got %d", *c.MaxRecoveryCalls)
	}
	if *c.MaxPageChars < 1 {
		return fmt.Errorf("max_page_chars must be at least 1, got %d", *c.MaxPageChars)
	}
	if *c.MaxSearchResults < 1 {
		return fmt.Errorf("max_search_results must be at least 1, got %d", *c.MaxSearchResults)
	}
	return nil
}

// recoveryConfig is the recovery package's Config of c (defaults applied).
func (c *RecoveryConfig) recoveryConfig() recovery.Config {
	return recovery.Config{
		Path:             c.RecoveryPath,
		MaxPageChars:     *c.MaxPageChars,
		MaxSearchResults: *c.MaxSearchResults,
		MaxRounds:        *c.MaxRecoveryRounds,
		MaxCalls:         *c.MaxRecoveryCalls,
	}.WithDefaults()
}

// compilerRecovery is what the compiler is told of recovery for the
// effective mode: the receipts' hint and, with tool, the definitions.
func compilerRecovery(mode string, cfg recovery.Config) compiler.Recovery {
	switch mode {
	case RecoveryTool:
		tools := compiler.ToolDefinitions{
			Chat:      string(recovery.Definition(response.FormatChat)),
			Responses: string(recovery.Definition(response.FormatResponses)),
			Anthropic: string(recovery.Definition(response.FormatAnthropic)),
			Gemini:    string(recovery.Definition(response.FormatGemini)),
		}
		return compiler.Recovery{Hint: recovery.ToolName + " artifact_get", ToolName: recovery.ToolName, Tools: tools, ConflictHint: apiHint(cfg)}
	case RecoveryAPI:
		return compiler.Recovery{Hint: apiHint(cfg)}
	}
	return compiler.Recovery{}
}

// apiHint is the receipts' hint that names the artifact API.
func apiHint(cfg recovery.Config) string { return "GET " + cfg.Path + "artifacts/{id}" }

// The Caddyfile's recovery subdirectives; UnmarshalCaddyfile finds them in
// subdirectives.
func init() {
	subdirectives["recovery"] = func(t *Handler, v string) error {
		switch v {
		case RecoveryTool, RecoveryAPI, RecoveryOff:
			t.Recovery = v
			return nil
		}
		return fmt.Errorf("want tool, api or off, got '%s'", v)
	}
	subdirectives["recovery_path"] = func(t *Handler, v string) error { t.RecoveryPath = v; return nil }
	subdirectives["max_recovery_rounds"] = func(t *Handler, v string) error { return setInt(&t.MaxRecoveryRounds, v, 1) }
	subdirectives["max_recovery_calls"] = func(t *Handler, v string) error { return setInt(&t.MaxRecoveryCalls, v, 1) }
	subdirectives["max_page_chars"] = func(t *Handler, v string) error { return setInt(&t.MaxPageChars, v, 1) }
	subdirectives["max_search_results"] = func(t *Handler, v string) error { return setInt(&t.MaxSearchResults, v, 1) }
}
