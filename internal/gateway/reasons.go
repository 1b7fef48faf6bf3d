package gateway

import "github.com/tokenterminator/caddy-token-terminator/internal/compiler"

// Pass-through reasons the gateway decides itself, before or around the
// compile (the compiler's own are in package compiler). Each is a fixed
// word, safe to log and to use as a metric label.
const (
	// ReasonContentEncoding: the body is encoded (gzip, …); it streams
	// through undecoded.
	ReasonContentEncoding compiler.Reason = "content_encoding"
	// ReasonTooLarge: the body is larger than max_body_size.
	ReasonTooLarge compiler.Reason = "too_large"
	// ReasonReadError: reading the body failed; what was read and the
	// error go upstream.
	ReasonReadError compiler.Reason = "read_error"
	// ReasonBusy: no room in max_buffered_bytes, or no compile slot
	// within compile_timeout.
	ReasonBusy compiler.Reason = "busy"
	// ReasonNoTenant: the request names no credential (and no configured
	// tenant), so it gets no cross-request state.
	ReasonNoTenant compiler.Reason = "no_tenant"
	// ReasonClientAbort: the client went away before the compile finished.
	ReasonClientAbort compiler.Reason = "client_abort"
	// ReasonSlowBody: the body did not arrive within body_read_timeout,
	// so it streamed through.
	ReasonSlowBody compiler.Reason = "slow_body"
	// ReasonBypass: the client asked for no compile (the bypass header).
	ReasonBypass compiler.Reason = "bypass"
	// ReasonUnverifiedTenant: the provider has not yet accepted a request
	// of this tenant, so it gets no state; a 2xx answer verifies it.
	ReasonUnverifiedTenant compiler.Reason = "unverified_tenant"
	// ReasonTenantRate: the tenant is not verified and the cap on new
	// tenants per minute was reached.
	ReasonTenantRate compiler.Reason = "tenant_rate"
	// ReasonRecoveryUnavailable: a WebSocket message whose rewrite
	// carries the recovery tool, on a socket where its loop cannot run (the
	// relay cannot inject follow-ups), goes out as the client sent it
	// (websocket_recovery.go).
	ReasonRecoveryUnavailable compiler.Reason = "recovery_unavailable"
	// ReasonChainTool: a WebSocket continuation whose rewrite would add
	// the recovery tool to a chain whose earlier messages went out without
	// it (the provider would re-read the chain's history uncached) goes
	// out as the client sent it (websocket_chain_tool.go).
	ReasonChainTool compiler.Reason = "chain_tool"
)
