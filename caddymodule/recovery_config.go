package caddymodule

import (
	"github.com/tokenterminator/caddy-token-terminator/internal/gateway"
	"github.com/tokenterminator/caddy-token-terminator/internal/recovery"
)

// Recovery modes (subdirective recovery).
const (
	// RecoveryTool offers the model the token_terminator tool and answers
	// its calls; the artifact API is served too.
	RecoveryTool = gateway.RecoveryTool
	// RecoveryAPI serves the artifact API only; receipts name its path.
	RecoveryAPI = gateway.RecoveryAPI
	// RecoveryOff serves nothing and offers nothing.
	RecoveryOff = gateway.RecoveryOff

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
