package caddymodule

import (
	"math"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/tokenterminator/caddy-token-terminator/internal/vault"
)

// With input prices and a currency configured, the records carry the
// price of a base-price input token and the stats add the costs up as
// money, in that currency; a total mixing currencies or unpriced records
// shows none.
func TestSavingsMoney(t *testing.T) {
	var h Handler
	in := "token_terminator {\ncost_currency USD\ncost_prices anthropic {\ninput_price 3\n}\n}"
	if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(in)); err != nil {
		t.Fatal(err)
	}
	price, cur := h.priceOf("anthropic_messages", "claude-sonnet-4-5")
	if cur != "USD" || math.Abs(price-3e-6) > 1e-15 {
		t.Fatalf("anthropic price %v %q, want 3e-6 USD", price, cur)
	}
	if p, c := h.priceOf("openai_chat", "gpt-4o"); p != 0 || c != "" {
		t.Fatalf("unpriced family: %v %q", p, c)
	}
	rec := func(raw, sent, price float64, currency string) vault.LedgerRecord {
		return vault.LedgerRecord{Decision: "accepted", CostRaw: raw, CostSent: sent, Price: price, Currency: currency}
	}
	st := summarize([]vault.LedgerRecord{rec(1e6, 4e5, 3e-6, "USD"), rec(2e6, 2e6, 3e-6, "USD")})
	if st.Currency != "USD" || math.Abs(st.Totals.CostSavedMoney-1.8) > 1e-9 || math.Abs(st.Totals.CostRawMoney-9) > 1e-9 {
		t.Fatalf("priced: currency %q, saved %v of %v, want USD 1.8 of 9", st.Currency, st.Totals.CostSavedMoney, st.Totals.CostRawMoney)
	}
	if st := summarize([]vault.LedgerRecord{rec(1e6, 4e5, 3e-6, "USD"), rec(1e6, 4e5, 3e-6, "EUR")}); st.Currency != "" {
		t.Errorf("mixed currencies shown as %q", st.Currency)
	}
	if st := summarize([]vault.LedgerRecord{rec(1e6, 4e5, 3e-6, "USD"), rec(1e6, 4e5, 0, "")}); st.Currency != "" {
		t.Errorf("a partly priced total shown as %q", st.Currency)
	}

	for in, want := range map[string]string{
		"token_terminator {\ncost_prices openai {\ninput_price 2.5\n}\n}":                   "input_price needs cost_currency",
		"token_terminator {\ncost_currency USD\ncost_prices openai {\ninput_price -1\n}\n}": "input_price: must be positive, got '-1'",
		"token_terminator {\ncost_currency \"US D\"\n}":                                     "cost_currency: want a currency code",
	} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}
