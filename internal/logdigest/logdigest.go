// Package logdigest is the one digest idemgate's log lines carry instead of
// an idempotency key or an owner. The proxy and the admin listener both log
// it, so it lives apart from either: one operation can be followed across
// their lines, and admin does not depend on the proxy to compute it.
package logdigest

import (
	"crypto/sha256"
	"encoding/hex"
)

// Of returns what a log line shows instead of s (a key or an owner): the
// first 12 hex digits (48 bits) of s's SHA-256, enough to correlate the
// lines of one operation without writing the value itself. README.md
// documents the format (`key_hash`, `owner_hash`).
func Of(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:6])
}
