// Package tokenterminator is the root of the Token Terminator Caddy module.
// Importing it registers the http.handlers.token_terminator handler and the
// token_terminator Caddyfile directive; xcaddy builds import the module path
// itself, which is why this file exists:
//
//	xcaddy build v2.11.9 --with github.com/tokenterminator/caddy-token-terminator@v0.0.0=.
package tokenterminator

import _ "github.com/tokenterminator/caddy-token-terminator/caddymodule"
