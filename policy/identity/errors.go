package identity

import "errors"

// Errors of key and owner extraction; the proxy maps each to a problem type.
var (
	// ErrKeyMissing: the idempotency key field is absent.
	ErrKeyMissing = errors.New("idempotency key missing")
	// ErrKeyInvalid: the field is present but not a valid key (see ParseKey).
	ErrKeyInvalid = errors.New("idempotency key invalid")
	// ErrOwnerMissing: the request carries a key but no owner value.
	ErrOwnerMissing = errors.New("owner missing")
	// ErrInvalidCredentials: the owner comes from credentials (owner: jwt)
	// and they are absent, malformed, unverifiable, expired, or issued by or
	// for someone else. Unlike ErrOwnerMissing it means 401: the request is
	// never treated as anonymous.
	ErrInvalidCredentials = errors.New("invalid credentials")
)
