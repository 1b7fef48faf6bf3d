package gateway

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
)

// Placeholders set for every candidate request, for access logs (log_append)
// and for handlers after token_terminator (e.g. header). They hold the
// decision and sizes only, never content.
const (
	PlaceholderDecision  = "http.token_terminator.decision"   // accepted, shadow or passthrough
	PlaceholderReason    = "http.token_terminator.reason"     // pass-through reason, "" when accepted
	PlaceholderRawBytes  = "http.token_terminator.raw_bytes"  // -1 when unknown
	PlaceholderSentBytes = "http.token_terminator.sent_bytes" // -1 when unknown
	PlaceholderReceipts  = "http.token_terminator.receipts"
)

func setPlaceholders(r *http.Request, o *outcome) {
	repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return
	}
	repl.Set(PlaceholderDecision, string(o.decisionWord()))
	repl.Set(PlaceholderReason, string(o.reason))
	repl.Set(PlaceholderRawBytes, o.rawBytes)
	repl.Set(PlaceholderSentBytes, o.sentBytes)
	repl.Set(PlaceholderReceipts, o.receipts)
}
