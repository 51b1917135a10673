// Command caddy is Caddy with the standard modules and idemgate's
// http.handlers.idempotency: the binary xcaddy builds with
// --with github.com/idemgate/idemgate/caddy, built here from this module's
// pinned versions (go build ./cmd/caddy).
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/idemgate/idemgate/caddy"
)

func main() {
	caddycmd.Main()
}
