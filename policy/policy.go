package policy

import (
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/idemgate/idemgate/policy/fingerprint"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/problem"
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
// lease ended: its proxy died mid-call, or the upstream's answer was lost
// (504 upstream-timeout, 502 upstream-failed), so the call may or may not
// have taken effect.
type OnAbandoned string

// Abandoned-claim behaviours.
const (
	// AbandonedTakeover forwards the retry again under a new claim: only
	// for upstreams that refuse a second run by themselves (a unique key
	// on their side) or operations that are naturally idempotent.
	AbandonedTakeover OnAbandoned = "takeover"
	// AbandonedReject (the default) answers 409 outcome-unknown, naming
	// when the first attempt started, until an operator purges the key:
	// an abandoned operation is never run again speculatively.
	AbandonedReject OnAbandoned = "reject"
)

// StatusRange is an inclusive range of status codes; "2xx" is {200, 299}.
type StatusRange struct{ Min, Max int }

// Route is the effective policy of one route (defaults already merged in).
type Route struct {
	Name  string
	Match string // net/http ServeMux pattern; "" for the defaults route
	// Upstream is the route's own backend (a route's `upstream:`), nil for
	// the global upstream.url. The fingerprint does not cover it, so routes
	// of different upstreams never share a scope (checkScopes).
	Upstream *url.URL
	// Scope is the key scope of the route's records (store.Identity.Scope):
	// DefaultScope unless the route sets `scope`. Records are found by owner,
	// scope and key, never by the route's name or match, so a reload that
	// adds, renames or reorders routes leaves every record reachable.
	Scope  string
	Mode   Mode
	Header string // canonical name of the idempotency key field
	// HeaderName is the key field's name as the config wrote it (say
	// X-GitHub-Delivery, where Header is X-Github-Delivery), for what is
	// published to clients (idemgate policy); set by New from Header when
	// empty or naming another field. Field names are case-insensitive
	// (RFC 9110 section 5.1), so lookups use Header.
	HeaderName string
	// Key says where the key is read: the Header field (the default) or a
	// member of a JSON body (`key: {from: body, pointer: /id}`).
	Key             identity.KeySource
	Methods         []string
	Required        bool
	Owner           identity.OwnerSource
	JWT             *identity.JWTSettings // the `jwt:` section; set exactly when Owner.Kind is identity.OwnerJWT
	AllowGlobalKeys bool
	Fingerprint     fingerprint.Spec
	Lease           time.Duration
	Retention       time.Duration // 0 keeps completed records forever
	Concurrent      Concurrent
	WaitTimeout     time.Duration
	ReplayStatuses  []StatusRange
	// UnknownStatuses are the answers that say nothing of whether the
	// upstream acted (unknown_statuses, none by default): a gateway
	// between idemgate and the application that answers 504 at its own
	// timeout while the application goes on, or a wrapper in process
	// that answers 503 for a handler it leaves running
	// (http.TimeoutHandler). Such an answer is passed on, neither stored
	// nor released: the claim is kept until its lease ends, then
	// on_abandoned decides, as for an upstream exchange that failed after
	// the request was sent. A status is in at most one of ReplayStatuses
	// and UnknownStatuses.
	UnknownStatuses  []StatusRange
	MaxRequestBytes  int64 // bytes
	MaxResponseBytes int64 // bytes
	OnStoreError     OnStoreError
	OnAbandoned      OnAbandoned
	// AdvertiseExpiry (`advertise_expiry`) makes first answers and replays
	// carry the record's expiry (Idempotency-Key-Expires), so a client
	// knows until when a retry is answered from the record (docs/configuration.md,
	// "Expiry advertisement").
	AdvertiseExpiry bool
	// ResourceFrom (`resource_from`) names where a stored response says
	// which resource it created: ResourceFromLocation indexes the record by
	// the path of its Location field, so a later DELETE of that path turns
	// it into a tombstone (docs/protocol.md, "Resource index and
	// tombstones"); "" (the default) indexes nothing.
	ResourceFrom string
	// TombstoneMethods (`tombstone_methods`, default [DELETE]) are the
	// methods that, answered 2xx by the upstream on a path where this
	// route's records are indexed, tombstone them. Read only when
	// ResourceFrom is set; the request may match any route.
	TombstoneMethods []string
	// Problems is the shape of the problems idemgate answers on this route
	// (the top-level `problems:` template, content_type and headers, or a
	// route's own `problems:`); nil answers RFC 9457 problem details. It
	// lives in the policy so that a reload replaces it with the rules.
	Problems *problem.Format

	// jwt verifies bearer tokens for identity.OwnerJWT; set by identity.KeyRing.Bind before
	// the policy is published, nil until then.
	jwt *identity.JWTVerifier

	// recipe caches Fingerprint.Recipe(), set by New.
	recipe string

	// ownerRecord is the owner record of the route's scope and owner
	// form (OwnerRecord), set by New; nil when its form needs none.
	ownerRecord *OwnerRecord

	// ReplayGRPCCodes (`replay_grpc_codes`) are the grpc-status codes
	// stored and replayed for a gRPC call (Content-Type application/grpc)
	// answered with a replayable HTTP status; nil means
	// DefaultReplayGRPCCodes (GRPCVerdictOf).
	ReplayGRPCCodes []int
}

// DefaultScope is the key scope that every route shares unless it sets
// `scope`: one idempotency key names one operation per owner, whichever
// route the request matched, and the fingerprint (which covers method and
// path) tells a reuse on another endpoint apart (422).
const DefaultScope = "default"

// ResourceFromLocation is the `resource_from` value that indexes a stored
// response by the path of its Location field.
const ResourceFromLocation = "location"

// TombstonesFor returns the routes whose records a request with method
// tombstones when the upstream answers it with 2xx: those with
// ResourceFrom set that list method in TombstoneMethods. Nil, without
// allocating, when there are none (every policy without resource_from).
func (p *Policy) TombstonesFor(method string) []*Route {
	if !p.indexes {
		return nil
	}
	var out []*Route
	for _, r := range append(p.routes[:len(p.routes):len(p.routes)], p.defaults) {
		if r.ResourceFrom != "" && slices.Contains(r.TombstoneMethods, method) {
			out = append(out, r)
		}
	}
	return out
}

// Recipe returns r.Fingerprint.Recipe(), computed once by New.
func (r *Route) Recipe() string {
	if r.recipe == "" {
		return r.Fingerprint.Recipe()
	}
	return r.recipe
}

// FingerprintOf returns the hs1 fingerprint of req with the given body bytes,
// per r.Fingerprint; the byte layout is frozen in docs/protocol.md.
func (r *Route) FingerprintOf(req *http.Request, body []byte) string {
	return r.Fingerprint.Of(req, body)
}
