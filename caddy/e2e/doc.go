// Package e2e runs idemgate's scenarios through a real Caddy built with
// the http.handlers.idempotency module, as xcaddy builds it (go build of
// ../cmd/caddy with this module's pinned versions), on a real
// valkey-server, in front of a real upstream behind Caddy's reverse_proxy.
//
// The tests are in their own package, which does not import Caddy, so that
// go test -race builds the test binary without Caddy; the Caddy binary is
// built once, without -race, in TestMain. The package has no code of its
// own outside its tests: this file only gives it its documentation.
package e2e
