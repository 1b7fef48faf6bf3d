package caddymodule

import (
	"errors"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	caddy.RegisterModule(SavingsHandler{})
	httpcaddyfile.RegisterHandlerDirective("token_terminator_savings", func(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
		var s SavingsHandler
		return &s, s.UnmarshalCaddyfile(h.Dispenser)
	})
	httpcaddyfile.RegisterDirectiveOrder("token_terminator_savings", httpcaddyfile.Before, "reverse_proxy")
}

// SavingsHandler serves the savings page and its data on an ordinary site
// route (http.handlers.token_terminator_savings, Caddyfile directive
// token_terminator_savings): the same as the admin API's
// /token-terminator/. With its default origins Caddy's admin API refuses a
// browser's typed navigation: the browser sends Sec-Fetch-Mode, which makes
// the admin check the origin, and a navigation has no Origin or Referer, so
// the origin is empty (admin { origins … "" } allows that one; README,
// "Savings page"). A site route needs no change to the admin API and can
// be opened from another machine: protect it with the usual matchers and
// basic_auth. A path ending in /stats or /ledger gets the JSON; any other
// path the page.
type SavingsHandler struct{}

// CaddyModule returns the Caddy module information.
func (SavingsHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.token_terminator_savings",
		New: func() caddy.Module { return new(SavingsHandler) },
	}
}

// ServeHTTP implements caddyhttp.MiddlewareHandler; it never calls next.
func (SavingsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	view := savingsPageView
	switch {
	case strings.HasSuffix(r.URL.Path, "/stats"):
		view = savingsStatsView
	case strings.HasSuffix(r.URL.Path, "/ledger"):
		view = savingsLedgerView
	}
	err := serveSavings(w, r, view)
	var apiErr caddy.APIError
	if errors.As(err, &apiErr) {
		return caddyhttp.Error(apiErr.HTTPStatus, apiErr.Err)
	}
	return err
}

// UnmarshalCaddyfile reads `token_terminator_savings`, which takes no
// arguments.
func (s *SavingsHandler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	if d.NextArg() || d.NextBlock(0) {
		return d.Err("token_terminator_savings takes no arguments")
	}
	return nil
}

var (
	_ caddyhttp.MiddlewareHandler = (*SavingsHandler)(nil)
	_ caddyfile.Unmarshaler       = (*SavingsHandler)(nil)
)
