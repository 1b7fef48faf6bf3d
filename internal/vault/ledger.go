package vault

import (
	"context"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/provider"
)

// LedgerRecord is the content-free record of one candidate request: what
// the gateway decided and what it saved. It never holds prompt content,
// tool arguments, credentials or raw model names: tenants and
// conversations are keyed hashes, the model is its normalized family.
type LedgerRecord struct {
	Time         int64           `json:"t"` // unix milliseconds
	Tenant       string          `json:"tenant,omitempty"`
	TenantLabel  string          `json:"tenant_label,omitempty"` // the operator's name for the tenant
	Conversation string          `json:"conversation,omitempty"`
	Format       provider.Format `json:"format"`
	Model        string          `json:"model,omitempty"` // normalized family, e.g. "gpt-4o", "claude-sonnet"
	Status       int             `json:"status"`          // the provider's answer, 0 when none
	Decision     string          `json:"decision"`
	Reason       string          `json:"reason,omitempty"`
	RawBytes     int64           `json:"raw_bytes"`
	SentBytes    int64           `json:"sent_bytes"`
	// Tokens as the gate measured them; both 0 when it did not.
	RawTokens  int `json:"raw_tokens,omitempty"`
	SentTokens int `json:"sent_tokens,omitempty"`
	Receipts   int `json:"receipts"`
	Folded     int `json:"folded"`
	// Expected billed input cost in base-input-token units; 0 when the
	// cost model did not judge the request.
	CostRaw  float64 `json:"cost_raw,omitempty"`
	CostSent float64 `json:"cost_sent,omitempty"`
	// The same over the decision's horizon (the third veto's figures: this
	// request plus reading its prompt back on the following ones, from the
	// cache as the conversation left it); 0 when not judged, and in
	// records written before they were kept.
	CostHorizonRaw  float64 `json:"cost_horizon_raw,omitempty"`
	CostHorizonSent float64 `json:"cost_horizon_sent,omitempty"`
	// Usage is what the provider reported it billed for the input; nil
	// when its answer carried no usage (and in older records).
	Usage *LedgerUsage `json:"usage,omitempty"`
	// Price is one base-price input token of the request's provider
	// family in Currency, when the operator configured it (cost_prices
	// input_price, cost_currency): the cost figures times Price are
	// money. 0 when not configured.
	Price    float64 `json:"price,omitempty"`
	Currency string  `json:"currency,omitempty"`
	// The holdout (caddymodule holdout.go). Arm is "treatment" or
	// "control"; "" when the request was in no arm (no holdout, or its
	// conversation key was never known). Retry: the body was the
	// conversation's previous one sent again. A control request went out
	// as the client sent it; its shadow compile's figures (what treatment
	// would have sent) are ShadowSentBytes and ShadowCostSent, or
	// ShadowSkipped when it was shed under load.
	Arm             string  `json:"arm,omitempty"`
	Retry           bool    `json:"retry,omitempty"`
	ShadowSkipped   bool    `json:"shadow_skipped,omitempty"`
	ShadowSentBytes int64   `json:"shadow_sent_bytes,omitempty"`
	ShadowCostSent  float64 `json:"shadow_cost_sent,omitempty"`
	// WebSocket: a message on a Responses WebSocket, not an HTTP request;
	// Status is then what an HTTP stream of the same answer would have
	// had (200 once the provider's terminal event for it came, 0 when
	// none came).
	WebSocket bool `json:"websocket,omitempty"`
}

// LedgerUsage is the provider's own account of a request's input tokens,
// split by how they are billed, and their price by the same cost model
// the expected figures use.
type LedgerUsage struct {
	Uncached   int `json:"uncached"`    // input tokens at the base price
	CacheRead  int `json:"cache_read"`  // read from the provider's prompt cache
	CacheWrite int `json:"cache_write"` // written to it (Anthropic's cache creation)
	// Cost prices the three in base-input-token units (cost_sent's units).
	Cost float64 `json:"cost"`
	// RecoveryRounds counts the upstream requests beyond the first that
	// the figures sum: the gateway's recovery rounds answered the model's
	// recovery tool calls, and each was billed.
	RecoveryRounds int `json:"recovery_rounds,omitempty"`
	// Output is the output tokens the provider billed (not priced in
	// Cost, which is of the input).
	Output int `json:"output,omitempty"`
}

// LedgerLimits bound a ledger: records older than Retention, and the
// oldest records beyond MaxRecords or MaxBytes (encoded keys and values),
// are dropped.
type LedgerLimits struct {
	Retention  time.Duration
	MaxRecords int64
	MaxBytes   int64
}

// LedgerQuery selects records: Since <= Time < Until (unix ms; 0 = no
// bound), newest first, at most Limit (0 = all).
type LedgerQuery struct {
	Since, Until int64
	Limit        int
}

// Ledger is the optional interface of a backend that keeps the request
// ledger. A backend without it runs with metrics only.
type Ledger interface {
	// AppendLedger stores records (one batch) and drops what lim no
	// longer allows, oldest first.
	AppendLedger(ctx context.Context, recs []LedgerRecord, lim LedgerLimits) error
	// ReadLedger returns the records q selects, newest first, within the
	// retention of the last append's limits.
	ReadLedger(ctx context.Context, q LedgerQuery) ([]LedgerRecord, error)
}
