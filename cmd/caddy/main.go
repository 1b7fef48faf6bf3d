// Command caddy is Caddy with its standard modules and Token Terminator.
//
//	go run ./cmd/caddy run --config Caddyfile.example
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/tokenterminator/caddy-token-terminator/caddymodule"
)

func main() {
	caddycmd.Main()
}
