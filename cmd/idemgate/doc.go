// Command idemgate is the idempotency-enforcing reverse proxy, one of
// idemgate's three shapes (the others run the same engine in process:
// package middleware and the Caddy module). Its commands: serve (the
// proxy, with its admin listener, reloads and graceful drain), demo (the
// proxy on the memory store in front of the example orders API), validate
// (every problem of a configuration, or every route's effective policy),
// init (a configuration from an OpenAPI description), policy (what the
// API's clients must know, as Markdown, JSON or OpenAPI), admin (inspect
// and purge records through the admin API), migrate (the Postgres store's
// schema), healthcheck (for container health checks) and version.
// docs/proxy.md describes each.
package main
