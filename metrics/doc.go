// Package metrics holds idemgate's Prometheus collectors, registered on an
// injected registry, never a global one: the standalone proxy serves them
// on its admin listener, the middleware registers them on the Registerer
// its caller gives, and the Caddy module on each loaded configuration's
// registry. The families, their labels and what each counts are the
// metrics table of docs/operations.md, which tests keep in step with what
// is registered and exported. No metric carries an idempotency key or an
// owner as a label.
package metrics
