package problem

import "net/http"

// Kind is one documented problem case: its type (Base+Slug), status and
// title, which never vary between answers of the case, and the outcome label
// under which the proxy counts it (one of metrics.Outcome*, written here as
// the plain label so that problem stays below metrics, which
// TestKindOutcomesAreMetricsLabels holds to the constants; "" for the admin
// listener's cases, which are not counted). Keeping the outcome here, next
// to the status, defines each (outcome, problem) pair once: the proxy counts
// a request by the kind it answers with, never by a second argument that
// could drift from it. The "Problem types" tables of docs/problems.md list
// every kind (TestCatalogMatchesREADME).
type Kind struct {
	// Slug names the case; the type URI is Base+Slug.
	Slug string
	// Status is the HTTP status of every answer of the case.
	Status int
	// Title is the short, fixed summary of the case (RFC 9457 section 3.1.4).
	Title string
	// Outcome is the idemgate_requests_total outcome label the proxy
	// counts the case under.
	Outcome string
}

// Type returns the kind's problem type URI.
func (k Kind) Type() string { return Base + k.Slug }

// With returns the problem of kind k with detail, the explanation of this
// occurrence.
func (k Kind) With(detail string) Details {
	return Details{Type: k.Type(), Title: k.Title, Status: k.Status, Detail: detail, Outcome: k.Outcome}
}

// The proxy's cases: what a client of an enforced route may get from
// idemgate itself.
var (
	InvalidKey         = Kind{"invalid-key", http.StatusBadRequest, "Invalid idempotency key", "invalid_key"}
	MissingKey         = Kind{"missing-key", http.StatusBadRequest, "Idempotency key required", "missing_key"}
	MissingOwner       = Kind{"missing-owner", http.StatusBadRequest, "Request owner missing", "missing_owner"}
	InvalidCredentials = Kind{"invalid-credentials", http.StatusUnauthorized, "Credentials missing or invalid", "invalid_credentials"}
	BadRequest         = Kind{"bad-request", http.StatusBadRequest, "Request body could not be read", "bad_request"}
	Ambiguous          = Kind{"ambiguous-request", http.StatusBadRequest, "Request form is ambiguous", "bad_request"}
	TooLarge           = Kind{"request-too-large", http.StatusRequestEntityTooLarge, "Request body too large", "too_large"}
	KeyReused          = Kind{"key-reused", http.StatusUnprocessableEntity, "Idempotency key reused for a different request", "mismatch"}
	InProgress         = Kind{"request-in-progress", http.StatusConflict, "A request with this idempotency key is still in progress", "conflict"}
	NotRetained        = Kind{"response-not-retained", http.StatusConflict, "The original response was not retained", "abandoned"}
	OutcomeUnknown     = Kind{"outcome-unknown", http.StatusConflict, "The outcome of the original request is unknown", "abandoned"}
	// ResourceDeleted answers a retry whose record is a tombstone: the
	// resource its first request created was deleted since (docs/protocol.md,
	// "Resource index and tombstones").
	// Counted as replayed: the answer comes from the record, and the
	// upstream is not called.
	ResourceDeleted  = Kind{"resource-deleted", http.StatusGone, "The resource this request created was deleted", "replayed"}
	ShuttingDown     = Kind{"shutting-down", http.StatusServiceUnavailable, "idemgate is shutting down", "shutting_down"}
	StoreUnavailable = Kind{"store-unavailable", http.StatusServiceUnavailable, "Idempotency store unavailable", "store_error"}
	// Overloaded answers a keyed request that found this instance with as
	// many requests waiting for a store answer as it admits
	// (server.max_store_waiting): refused at once, before anything is
	// claimed or forwarded, instead of queueing for the store until its
	// timeout. On fail_open routes too: the store is answering, only
	// slower than the traffic, and forwarding unprotected would pass the
	// overload on to the upstream.
	Overloaded = Kind{"overloaded", http.StatusServiceUnavailable, "Too many requests wait for the idempotency store", "overloaded"}
	// StoredResponseDamaged answers a retry whose stored response failed
	// its integrity check (store.ErrStoredResponseDamaged): it is neither
	// replayed nor run again, even on a fail_open route, since the
	// operation did run; an operator inspects and purges the record.
	StoredResponseDamaged = Kind{"stored-response-damaged", http.StatusInternalServerError, "The stored response failed its integrity check", "store_error"}
	// OwnerSourceConflict answers a keyed request of a scope whose owner
	// record (policy.OwnerRecord) names another owner source than the
	// route's: the scope's records were written with owners of the same
	// form from that other source, so a principal of the route's source
	// could be answered another's records. Nothing is claimed or
	// forwarded, on fail_open routes too (the store answered); an
	// operator fixes the configuration or deletes the record on purpose.
	OwnerSourceConflict = Kind{"owner-source-conflict", http.StatusInternalServerError, "The route's owner source conflicts with the one recorded for its key scope", "store_error"}
	UpstreamUnreachable = Kind{"upstream-unreachable", http.StatusBadGateway, "Upstream unreachable", "upstream_error"}
	UpstreamFailed      = Kind{"upstream-failed", http.StatusBadGateway, "Upstream exchange failed; outcome unknown", "upstream_error"}
	UpstreamTimeout     = Kind{"upstream-timeout", http.StatusGatewayTimeout, "Upstream timed out; outcome unknown", "upstream_error"}
)

// The proxy's refusals of a request's protocol form, on any route; they
// are counted as bad requests.
var (
	// RequestTrailers answers a keyed request on an enforced route that
	// carries trailer fields (RFC 9110 section 6.5), announced in a
	// Trailer field or sent after a chunked or HTTP/2 body: the
	// fingerprint does not cover them, so two requests that differ only in
	// a trailer would be one operation (docs/protocol.md, "Fingerprint
	// recipes").
	RequestTrailers = Kind{"request-trailers", http.StatusBadRequest, "Request trailers are not accepted with an idempotency key", "bad_request"}
	// HTTP2Preface answers a request with method PRI: the HTTP/2
	// connection preface (RFC 9113 section 3.4) read as an HTTP/1.1
	// request, which is what net/http hands the handler when HTTP/2
	// without TLS (server.h2c) is off, or when the preface is cut short.
	// 505: the listener does not speak that version (RFC 9110 section
	// 15.6.6). The whole preface on a listener without h2c is answered in
	// HTTP/2 instead, a GOAWAY with the reason (proxy's goAwayPreface);
	// this kind answers the rest.
	HTTP2Preface = Kind{"http2-preface", http.StatusHTTPVersionNotSupported, "HTTP/2 without TLS is not served here", "bad_request"}
	// AsteriskTarget answers a request whose target is "*" (the asterisk
	// form, RFC 9112 section 3.2.4) with a method other than OPTIONS: the
	// form names the server, never a resource, so it is no path to
	// forward. OPTIONS * itself is answered by idemgate (net/http's
	// server-wide OPTIONS handler), never forwarded.
	AsteriskTarget = Kind{"asterisk-target", http.StatusBadRequest, "Request target * is only valid with OPTIONS", "bad_request"}
)

// The admin listener's own cases; it also answers StoreUnavailable.
var (
	AdminUnauthorized    = Kind{"admin-unauthorized", http.StatusUnauthorized, "Unauthorized", ""}
	AdminDisabled        = Kind{"admin-disabled", http.StatusForbidden, "Admin API Disabled", ""}
	AdminBadRequest      = Kind{"admin-bad-request", http.StatusBadRequest, "Bad Request", ""}
	AdminUnknownRoute    = Kind{"admin-unknown-route", http.StatusNotFound, "Unknown Route", ""}
	AdminRecordNotFound  = Kind{"admin-record-not-found", http.StatusNotFound, "Record Not Found", ""}
	AdminRecordRunning   = Kind{"admin-record-running", http.StatusConflict, "Record Running", ""}
	AdminInternal        = Kind{"admin-internal", http.StatusInternalServerError, "Internal Error", ""}
	PolicyNotLoaded      = Kind{"policy-not-loaded", http.StatusServiceUnavailable, "Policy Not Loaded", ""}
	NotReady             = Kind{"not-ready", http.StatusServiceUnavailable, "Not Ready", ""}
	MetricsNotConfigured = Kind{"metrics-not-configured", http.StatusNotFound, "Metrics Not Configured", ""}
	MethodNotAllowed     = Kind{"method-not-allowed", http.StatusMethodNotAllowed, "Method Not Allowed", ""}
	NotFound             = Kind{"not-found", http.StatusNotFound, "Not Found", ""}
)

// Catalog returns every kind idemgate answers with, proxy's first, each
// once.
func Catalog() []Kind {
	return []Kind{
		InvalidKey, MissingKey, MissingOwner, InvalidCredentials, BadRequest, Ambiguous, TooLarge, KeyReused,
		InProgress, NotRetained, OutcomeUnknown, ResourceDeleted, ShuttingDown, StoreUnavailable, Overloaded, StoredResponseDamaged, OwnerSourceConflict,
		UpstreamUnreachable, UpstreamFailed, UpstreamTimeout, RequestTrailers, HTTP2Preface, AsteriskTarget,
		AdminUnauthorized, AdminDisabled, AdminBadRequest, AdminUnknownRoute, AdminRecordNotFound,
		AdminRecordRunning, AdminInternal, PolicyNotLoaded, NotReady, MetricsNotConfigured, MethodNotAllowed, NotFound,
	}
}
