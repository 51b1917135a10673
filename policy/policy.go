// Package policy decides, per request, whether and how idempotency is enforced.
package policy

import (
	"errors"
	"net/http"
	"time"
)

// Mode says whether a route enforces idempotency.
type Mode string

// Modes of a route.
const (
	ModeEnforce     Mode = "enforce"
	ModePassthrough Mode = "passthrough"
)

// Concurrent says what a request does when its identity is still running.
type Concurrent string

// Concurrent behaviours.
const (
	ConcurrentWait     Concurrent = "wait"
	ConcurrentConflict Concurrent = "conflict"
)

// OnStoreError says what happens when the store cannot be reached.
type OnStoreError string

// Store error behaviours.
const (
	FailClosed OnStoreError = "fail_closed"
	FailOpen   OnStoreError = "fail_open"
)

// OnAbandoned says what a retry does when it finds a running record whose
// lease ended (its proxy died mid-call).
type OnAbandoned string

// Abandoned-claim behaviours.
const (
	AbandonedTakeover OnAbandoned = "takeover"
	AbandonedReject   OnAbandoned = "reject"
)

// BodyMode says how the request body enters the fingerprint.
type BodyMode string

// Body modes.
const (
	BodyRaw    BodyMode = "raw"
	BodyJSON   BodyMode = "json"
	BodyIgnore BodyMode = "ignore"
)

// OwnerKind names where a request's owner comes from.
type OwnerKind string

// Owner sources.
const (
	OwnerHeader        OwnerKind = "header"        // header:NAME, a trusted header the auth layer sets
	OwnerAuthorization OwnerKind = "authorization" // SHA-256 of the Authorization header
	OwnerClientCert    OwnerKind = "client-cert"   // SHA-256 of the verified leaf certificate
	OwnerNone          OwnerKind = "none"          // global keys; needs allow_global_keys
)

// OwnerSource is a parsed `owner:` setting.
type OwnerSource struct {
	Kind   OwnerKind
	Header string // canonical header name, for OwnerHeader
}

// FingerprintSpec is a parsed `fingerprint:` setting.
type FingerprintSpec struct {
	Headers []string // header names, lowercased and sorted
	Query   bool
	Body    BodyMode
}

// StatusRange is an inclusive range of status codes; "2xx" is {200, 299}.
type StatusRange struct{ Min, Max int }

// Route is the effective policy of one route (defaults already merged in).
type Route struct {
	Name             string
	Match            string // net/http ServeMux pattern; "" for the defaults route
	Mode             Mode
	Header           string // canonical name of the idempotency key field
	Methods          []string
	Required         bool
	Owner            OwnerSource
	AllowGlobalKeys  bool
	Fingerprint      FingerprintSpec
	Lease            time.Duration
	Retention        time.Duration // 0 keeps completed records forever
	Concurrent       Concurrent
	WaitTimeout      time.Duration
	ReplayStatuses   []StatusRange
	MaxRequestBytes  int64 // bytes
	MaxResponseBytes int64 // bytes
	OnStoreError     OnStoreError
	OnAbandoned      OnAbandoned
}

// Errors of key and owner extraction; the proxy maps each to a problem type.
var (
	// ErrKeyMissing: the idempotency key field is absent.
	ErrKeyMissing = errors.New("idempotency key missing")
	// ErrKeyInvalid: the field is present but not a valid key (see ParseKey).
	ErrKeyInvalid = errors.New("idempotency key invalid")
	// ErrOwnerMissing: the request carries a key but no owner value.
	ErrOwnerMissing = errors.New("owner missing")
)

// ParseKey extracts the idempotency key from the values of the key field
// (h.Values(name)). It accepts an RFC 8941 sf-string item, as
// draft-ietf-httpapi-idempotency-key-header section 2 defines, and a bare
// token. It returns ErrKeyMissing when there is no value, and an error
// wrapping ErrKeyInvalid for: an empty key, more than 255 characters, list
// syntax, parameters, non-printable or non-ASCII characters, or the field
// sent more than once.
func ParseKey(values []string) (string, error) { panic("policy: not implemented") }

// Enforces reports whether requests with this method are enforced on r (mode
// enforce and method listed).
func (r *Route) Enforces(method string) bool { panic("policy: not implemented") }

// Replayable reports whether a response with this status is stored and
// replayed (replay_statuses).
func (r *Route) Replayable(status int) bool { panic("policy: not implemented") }

// OwnerOf returns the owner value of req per r.Owner: the trusted header's
// value, "sha256:"+hex of the Authorization header, "cert:"+hex SHA-256 of
// the verified leaf certificate, or "" for none. It returns ErrOwnerMissing
// when the source yields no value.
func (r *Route) OwnerOf(req *http.Request) (string, error) { panic("policy: not implemented") }

// FingerprintOf returns the hs1 fingerprint of req with the given body bytes,
// per r.Fingerprint; the byte layout is frozen in docs/protocol.md.
func (r *Route) FingerprintOf(req *http.Request, body []byte) string { panic("policy: not implemented") }

// Policy is a compiled, immutable set of routes; safe for concurrent use.
type Policy struct{}

// Match returns the route for req by net/http ServeMux precedence (most
// specific pattern wins), or the defaults route (Name "default") when no
// route matches. Never nil.
func (p *Policy) Match(req *http.Request) *Route { panic("policy: not implemented") }

// Routes returns every route in file order, then the defaults route.
func (p *Policy) Routes() []*Route { panic("policy: not implemented") }
