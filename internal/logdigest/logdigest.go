// Package logdigest is the one digest idemgate's log lines carry instead of
// an idempotency key or an owner. The proxy and the admin listener both log
// it, so it lives apart from either: one operation can be followed across
// their lines, and admin does not depend on the proxy to compute it.
package logdigest

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// Of returns what a log line shows instead of s (a key or an owner): the
// first 12 hex digits (48 bits) of s's SHA-256, enough to correlate the
// lines of one operation without writing the value itself. docs/operations.md
// documents the format (`key_hash`, `owner_hash`).
func Of(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:6])
}

// OfIdentity returns what a log line shows for one operation: the first 12
// hex digits of the SHA-256 of its owner, host scope and idempotency key,
// each of the first two preceded by its length in decimal and a colon, so
// that no two identities share an input. Clients reuse key names across
// owners, so a digest of the key alone names several operations at once;
// this one names exactly one. docs/operations.md documents the format (`key_hash`).
func OfIdentity(owner, scope, key string) string {
	var buf [256]byte // on the stack for usual identities
	b := strconv.AppendInt(buf[:0], int64(len(owner)), 10)
	b = append(append(b, ':'), owner...)
	b = strconv.AppendInt(b, int64(len(scope)), 10)
	b = append(append(b, ':'), scope...)
	b = append(b, key...)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}
