package store

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Identity names one idempotency record: the owner (principal) that sent the
// request, the key scope of the route it matched and the idempotency key it
// carried. Keys are always scoped by Owner and Scope, never global (an Owner
// of "" is the explicit global scope that a route must opt into).
//
// Scope is a route's `scope` setting, shared by every route by default, and
// never the route's name: adding, renaming or reordering routes, or changing
// a route's match, must leave every record reachable by its retries.
// Records written before layout 2 used the route's name as the scope;
// docs/protocol.md, "Layout versions", says how they are still found.
type Identity struct {
	Owner string
	Scope string
	Key   string
}

// Response is a stored upstream response, replayed byte for byte.
type Response struct {
	// Status is the HTTP status code, 100..599.
	Status int
	// Header holds the end-to-end response headers. Values of one name keep
	// their order and each Set-Cookie line stays a separate value.
	Header http.Header
	// Body is the complete response body in bytes; binary safe.
	Body []byte
	// Trailer holds the trailer fields the upstream sent after the body (RFC
	// 9110 section 6.5), encoded like Header; nil or empty when there were none
	// (a store may hand back either). Replays send them again, chunked
	// (TestTrailersKeptAndReplayed). Records written before trailers were
	// kept have none.
	Trailer http.Header
	// Omitted is true when the upstream answered but the response was larger
	// than the route's max_response_bytes, so only Status was kept; a retry
	// gets a terminal problem response instead of a replay.
	Omitted bool
	// StoredAt is when the store recorded the response, from the store's
	// clock, truncated to milliseconds.
	StoredAt time.Time
}

// State is the state of a record as seen by Claim and Get.
type State int

const (
	// Absent: no record (never claimed, released, purged or past retention).
	Absent State = iota
	// Claimed: this Claim call created (or took over) the record and now
	// holds it with its token.
	Claimed
	// Running: another token holds the record and its lease has not ended.
	Running
	// Completed: the record holds a Response.
	Completed
	// Abandoned: the record is running past its lease end and the claim asked
	// not to take abandoned records over (ClaimParams.NoTakeover), or the
	// fingerprint differs from the abandoned record's.
	Abandoned
	// Gone: the record is a tombstone (Store.Tombstone): the resource
	// its response created was deleted, so the record keeps no fingerprint
	// and no response, cannot be claimed, and answers Gone to every Claim
	// until its retention end (docs/protocol.md, "Resource index and
	// tombstones").
	Gone
)

// String returns the lowercase state name used in logs and the admin API.
func (s State) String() string {
	switch s {
	case Absent:
		return "absent"
	case Claimed:
		return "claimed"
	case Running:
		return "running"
	case Completed:
		return "completed"
	case Abandoned:
		return "abandoned"
	case Gone:
		return "gone"
	}
	return "unknown"
}

// ClaimParams are the inputs of Claim; Validate checks the bounds below.
type ClaimParams struct {
	Identity Identity
	// Fingerprint identifies the request (see fingerprint.Of in package policy/fingerprint), at most
	// MaxFingerprintBytes.
	Fingerprint string
	// Recipe names how Fingerprint was computed (fingerprint.Spec.Recipe,
	// at most MaxRecipeBytes); the record keeps it, so a retry made after the
	// route's fingerprint settings changed is compared the way its first
	// request was fingerprinted. The store never interprets it.
	Recipe string
	// Token is a random, unique, non-empty string naming this claim
	// attempt; only the holder of the token may Complete, Release or Extend
	// the record.
	Token string
	// Lease is how long the claim holds the record without an Extend; at
	// least 1 ms, millisecond resolution.
	Lease time.Duration
	// Retention is how long a completed record is kept after Complete;
	// 0 keeps it forever. Millisecond resolution.
	Retention time.Duration
	// NoTakeover makes a record running past its lease answer Abandoned
	// instead of being taken over (route setting on_abandoned: reject).
	NoTakeover bool
}

// ClaimResult is the outcome of Claim.
type ClaimResult struct {
	// State is Claimed, Running, Completed, Abandoned or Gone (never
	// Absent); a Gone result carries nothing else.
	State State
	// Takeover is true when State is Claimed and the claim replaced a
	// running record whose lease had ended (the previous holder is presumed
	// dead).
	Takeover bool
	// Fingerprint is the record's fingerprint for Running, Completed and
	// Abandoned; for Claimed it is the caller's.
	Fingerprint string
	// Recipe is the record's fingerprint recipe for Running, Completed and
	// Abandoned ("" for a record written before layout 2, which has none);
	// for Claimed it is the caller's.
	Recipe string
	// Response is the stored response when State is Completed.
	Response *Response
	// LeaseEnd is when the current lease ends (Claimed and Running).
	LeaseEnd time.Time
}

// Record is the whole state of one identity, for operators (Get).
type Record struct {
	Identity    Identity
	State       State // Running, Completed, Abandoned (a running record past its lease end) or Gone (a tombstone: no fingerprint, recipe or response)
	Fingerprint string
	// Recipe is how Fingerprint was computed; "" for a layout 1 record.
	Recipe string
	// Token is the holder's token while State is Running or Abandoned; a
	// completed record holds no token.
	Token string
	// Response is set when State is Completed.
	Response *Response
	// CreatedAt is when the record was (last) claimed.
	CreatedAt time.Time
	// LeaseEnd is the end of the current lease; zero once completed.
	LeaseEnd time.Time
	// RetentionEnd is when the record stops existing; zero means never. For
	// a running record it is its expiry: the later of the lease end and
	// claim time plus retention, or lease end plus AbandonedKeep (24 h) when
	// retention is 0
	// (a repeated claim computes it again from its own time, never earlier).
	RetentionEnd time.Time
}

// Layout1 reports whether r was written before layout 2 (docs/protocol.md,
// "Layout versions"): such a record has no recipe and is never a tombstone
// (tombstones came later). A layout 1 record sits under (owner, route name,
// key); a route name is also a legal scope, so a current record can sit
// under the same identity. The lookups that look for layout 1 records (the
// proxy's store.v1_lookup, the admin API's fallback) accept only records
// for which Layout1 holds: what a record is, not where it lies, tells the
// two apart, so one route's record is never read, replayed or purged as
// another's (TestV1LookupIgnoresCurrentRecords, TestAdminV1FallbackOnlyLayout1).
func (r *Record) Layout1() bool {
	return r != nil && r.Recipe == "" && r.State != Gone
}

// ErrUnavailable wraps every failure to reach or use the backing server, so
// callers can fail closed with errors.Is(err, store.ErrUnavailable). Context
// errors are returned wrapped as well (errors.Is(err, context.DeadlineExceeded)
// keeps working).
var ErrUnavailable = errors.New("store unavailable")

// OpError is the error of a store operation that could not reach or use
// the backing server, like net.OpError for a network operation: it wraps
// ErrUnavailable and its cause (a server or connection error, a done
// context), so both errors.Is(err, ErrUnavailable) and
// errors.Is(err, context.DeadlineExceeded) hold, and errors.As finds the
// operation. Drivers return it instead of formatting the message by hand.
type OpError struct {
	// Store names the driver: "memory", "bolt", "valkey", "postgres".
	Store string
	// Op is the operation: "claim", "complete", ..., "ping", "sweep".
	Op string
	// Err is the cause.
	Err error
}

// Error reads "<store> store: <op>: store unavailable: <cause>".
func (e *OpError) Error() string {
	return e.Store + " store: " + e.Op + ": " + ErrUnavailable.Error() + ": " + e.Err.Error()
}

// Unwrap returns ErrUnavailable and the cause.
func (e *OpError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }

// ErrNotAcknowledged wraps a write that the backing server made but that
// fewer replicas (or, with an AOF requirement, not the primary's disk)
// acknowledged within the configured time (Valkey store, acks): a failover
// may still lose it, so it does not count as made. It wraps ErrUnavailable,
// so errors.Is(err, ErrUnavailable) holds for it and callers that fail
// closed on ErrUnavailable keep doing so; callers that care tell it apart
// with errors.Is(err, ErrNotAcknowledged). The write itself may persist on
// the primary: a Claim answered with it still holds the record until it is
// released or its lease ends, and a Complete answered with it may be
// repeated (see the contract, rule 3). A Claim or Get that finds a
// completed record answers it too while the replicas have not
// acknowledged that record: it is not replayed before it would survive a
// failover.
var ErrNotAcknowledged = fmt.Errorf("%w: write not acknowledged by the required replicas in time", ErrUnavailable)

// ErrCompletedNotAcknowledged is wrapped, beside ErrNotAcknowledged, by
// the error of a Claim that found the record completed while the replicas
// have not acknowledged that completion (Valkey store, acks): the
// operation ran, so no caller may take the error for a store it could not
// reach and run the operation again (a fail_open route's unprotected
// forward); the request is refused until the acknowledgement comes, and
// then replayed.
var ErrCompletedNotAcknowledged = errors.New("the record is completed and its completion not acknowledged yet")

// ErrStoredResponseDamaged is wrapped (beside ErrStoredResponse) by the
// error of a checked response whose body has another length or whose
// bytes have another CRC-32C than the check written with them: the record
// was cut short or damaged in the store. It is never replayed, and no
// retry forwards its operation again: the proxy answers
// problem.StoredResponseDamaged and counts it.
var ErrStoredResponseDamaged = errors.New("stored response failed its integrity check")

// ErrStoredResponse is wrapped by every error of a stored response that
// does not parse: a store error, never a guess at what was meant.
var ErrStoredResponse = errors.New("stored response of layout 3")

// MaxRecipeBytes bounds ClaimParams.Recipe, in bytes.
const MaxRecipeBytes = 1024

// AbandonedKeep is how long a running record whose claim had Retention 0
// outlives its lease end (Record.RetentionEnd, contract rule 6): an
// abandoned claim stays visible to on_abandoned: reject for a day, while
// no record lives forever. Every driver applies this one value: memory
// and bolt through their shared claim rules, Valkey in claim.lua and
// extend.lua (filled in when the scripts are built), Postgres in its claim
// and extend statements (docs/protocol.md, "Layout versions").
const AbandonedKeep = 24 * time.Hour

// SafetyPoll is the longest a waiter relies on Watch alone: it re-checks the
// record at least this often in case a notification was lost.
const SafetyPoll = time.Second

// Store keeps idempotency records. Every method is atomic for its identity
// and safe for concurrent use by many goroutines and many processes sharing
// one backing server.
//
// The contract (checked by store/storetest.Run for every implementation):
//
//  1. Claim on an identity with no record, an expired record (past its
//     retention end), or a running record past its lease end whose
//     fingerprint equals the caller's (a takeover, unless NoTakeover) writes
//     a running record holding Token with lease end now+Lease, and answers
//     Claimed. Of N concurrent Claims on a free identity exactly one answers
//     Claimed. A running record with a different fingerprint is never taken
//     over. A running record within its lease answers Running; a completed
//     record answers Completed with its Response. A Claim repeating the
//     token that holds the record answers Claimed again, so a client may
//     retry a Claim whose reply was lost without locking itself out; it
//     restarts the lease (lease end now+Lease, expiry as a fresh claim's
//     but never earlier) and answers the new lease end, so the claimer
//     holds the record for a whole lease from the answer it gets, even
//     when the first attempt's lease is near or past its end.
//  2. A lease or retention has run out once its end time is reached: end <= now
//     is over, end > now is valid. A record past its retention end is absent
//     to every operation.
//  3. Complete, Release and Extend act only while the record still holds the
//     given token (not after a takeover, not after completion); otherwise they
//     change nothing and return false. A completed record holds no token.
//     Complete and Extend act on a running record even past its lease end as
//     long as nobody has taken it over. One exception, for stores that can
//     answer ErrNotAcknowledged (Valkey with acks on) only: a Complete
//     repeating the token that completed the record answers true again and
//     keeps the first response; it re-confirms the completion (the store
//     writes a marker, so its acknowledgement covers the completion), which
//     is how a completion that was not acknowledged, or whose reply was
//     lost, is retried. Such a store never returns the token in Record.
//  4. All times come from one clock: the backing server's (Valkey: TIME inside
//     the script), never the caller's.
//  5. Failure to reach or use the backing server, or a done context, returns
//     an error wrapping ErrUnavailable (and the context error); never
//     Claimed, never false. A server that refuses writes but still
//     answers reads (Valkey at maxmemory under noeviction) may still
//     answer a Claim with Completed or Gone, read as rule 1 answers them,
//     since neither answer writes; every other answer of such a Claim is
//     that error.
//  6. Retention 0 keeps completed records forever. A running record always
//     has an expiry (at least its lease end), so a crashed holder never
//     leaves a record that lives forever.
//  7. Identity, fingerprint, recipe, token and response come back exactly as
//     given, binary bodies included.
//  8. Complete, Release and Delete wake the identity's watchers (Watch), in
//     this process and in every other process sharing the backing server.
//
// Rules 9 to 13 are the resource index and tombstones of routes with
// `resource_from` (store/storetest.Run, subtests Tombstone*):
//
//  9. Index adds the completed record of id to the index of
//     Resource{id.Owner, id.Scope, path}, remembering which completion it
//     saw (the record's StoredAt): a record claimed again later (after its
//     retention, or an operator purge) is a new record and is not
//     tombstoned by an index entry of the old one. Indexing an absent,
//     running or gone record does nothing and is no error. Indexing the
//     same record twice is the same as once.
//  10. The index is bounded by the records: an entry lives no longer than
//     its record's retention end (forever only for retention 0), and a
//     store may drop entries whose record is gone or past its end.
//  11. Tombstone turns every completed record indexed at res whose
//     completion is the indexed one into a tombstone and returns how many
//     it turned. A tombstone keeps its identity and retention end, drops
//     fingerprint, recipe and response, and answers Gone to Claim and Get
//     until its retention end; Complete, Release and Extend never act on
//     it (it holds no token); Delete removes it. Records of other owners,
//     scopes or paths are untouched.
//  12. Tombstone is idempotent: calling it again (a retry after an error,
//     another instance doing the same) tombstones nothing twice and never
//     revives a record. It may act on some records and then fail (stores
//     whose index and records live apart, e.g. Valkey Cluster): the error
//     wraps ErrUnavailable and the caller retries the whole call.
//  13. Errors, a done ctx included, wrap ErrUnavailable.
type Store interface {
	// Claim tries to take the record for p.Identity; see the contract above.
	// Errors wrap ErrUnavailable, except for parameters that p.Validate
	// rejects: that error wraps ErrInvalid.
	Claim(ctx context.Context, p ClaimParams) (ClaimResult, error)
	// Complete stores resp in the record while it still holds token, ends
	// the lease and sets the retention end to now+Retention of the claim
	// (never, when Retention was 0). It reports whether it did. Errors wrap
	// ErrUnavailable.
	Complete(ctx context.Context, id Identity, token string, resp Response) (bool, error)
	// Release deletes the record while it still holds token, so the key can
	// be claimed again, and reports whether it did. Errors wrap ErrUnavailable.
	Release(ctx context.Context, id Identity, token string) (bool, error)
	// Extend moves the lease end to now+lease while the record still holds
	// token (the heartbeat of a long upstream call) and reports whether it
	// did. Errors wrap ErrUnavailable, except for a lease that
	// ValidateLease rejects: that error wraps ErrInvalid.
	Extend(ctx context.Context, id Identity, token string, lease time.Duration) (bool, error)
	// Get returns the record for id, or nil when it is absent. Errors wrap
	// ErrUnavailable.
	Get(ctx context.Context, id Identity) (*Record, error)
	// Delete removes the record for id whatever its state (operator purge)
	// and reports whether one existed. Errors wrap ErrUnavailable.
	Delete(ctx context.Context, id Identity) (bool, error)
	// Watch returns a channel that is closed after the record for id is next
	// completed, released or deleted, and a stop function the caller must
	// call when done waiting. The channel may also close spuriously (for
	// example when the notification connection is re-established); callers
	// re-Claim after it closes and poll at least every SafetyPoll in case a
	// notification was lost. Call Watch before the Claim whose Running
	// answer you will wait on, so no notification falls between the two.
	Watch(id Identity) (changed <-chan struct{}, stop func())
	// Ping checks that the backing server answers (for readiness). Errors
	// wrap ErrUnavailable.
	Ping(ctx context.Context) error
	// Index adds the completed record of id to the index of the resource
	// at path (owner and scope are id's); see rules 9 and 10 above.
	// Errors wrap ErrUnavailable.
	Index(ctx context.Context, path string, id Identity) error
	// Tombstone turns the records indexed at res into tombstones and
	// returns how many it turned; see rules 11 and 12 above. Errors wrap
	// ErrUnavailable.
	Tombstone(ctx context.Context, res Resource) (int, error)
	// Close releases connections and stops background work.
	Close() error
}

// Sweeper is implemented by stores that keep expired records until a
// sweep removes them (memory, bolt, Postgres; Valkey expires its keys by
// itself). A record past its retention end is absent to every operation
// whether swept or not (contract rule 2): sweeping only keeps the store
// from growing. Such stores sweep in the background; callers and tests
// may also sweep at once. Check for it with a type assertion.
type Sweeper interface {
	// Sweep removes records past their retention end, never a live one,
	// and returns how many it removed. A driver may bound the work of one
	// call and leave the rest to the next. Errors, a done ctx included,
	// wrap ErrUnavailable.
	Sweep(ctx context.Context) (int, error)
}

// Resource names the index of one created resource: the records of one
// owner and key scope whose responses named Path (a route with
// `resource_from: location`: the cleaned path of the response's Location
// field). The index is per owner, so a DELETE by one owner never touches
// another owner's records for the same path.
type Resource struct {
	Owner string
	Scope string
	Path  string
}

// CacheResult says how ReplayCache.CachedReplay came by its answer.
type CacheResult int

const (
	// CacheSkipped: nothing was looked up (no cache, or this instance has
	// not seen the record completed), so no round trip was made; the
	// caller claims as usual.
	CacheSkipped CacheResult = iota
	// CacheHit: answered from the in-process cache, with no round trip
	// for the record (the store may have sent a liveness check first,
	// rule 2 of ReplayCache: on Valkey one PING per valkey.CacheFence at
	// most under steady load).
	CacheHit
	// CacheMiss: the cache held nothing for the record, so it was read
	// from the server (one round trip) and is cached from now on.
	CacheMiss
)

// String returns "skipped", "hit" or "miss", the metric label.
func (r CacheResult) String() string {
	switch r {
	case CacheHit:
		return "hit"
	case CacheMiss:
		return "miss"
	}
	return "skipped"
}

// ReplayCache is implemented by stores that keep completed records in an
// in-process cache the backing server keeps coherent (the Valkey store with
// store.valkey.cache_bytes > 0: server-assisted client-side caching;
// docs/performance.md, "Replay cache"). The proxy asks it before claiming, so a
// retry of a request this instance has seen completed is replayed with no round
// trip. Check for it with a type assertion, or call CachedReplayOf.
//
// The contract:
//
//  1. CachedReplay returns a record only when it is Completed, with its
//     identity, fingerprint, recipe and response exactly as Get returns
//     them (and as Claim's Completed answer carries them); it never
//     returns a running, abandoned or gone record, and never claims.
//  2. A record that changes, is deleted or ends (retention) stops being
//     returned once the backing server has told this process (Valkey:
//     an invalidation message), and at once when the connection that
//     carried it is lost; a caller that gets nil claims as usual. A
//     server that has not answered this process for a bound the
//     implementation names (Valkey: valkey.CacheFence) cannot vouch for
//     a cached record: CachedReplay then asks it first, and fails when it
//     does not answer.
//  3. It costs no round trip for an identity this instance has not seen
//     completed (CacheSkipped), so a fresh key costs what Claim costs.
//  4. Errors wrap ErrUnavailable; the caller then claims as usual, and
//     that claim fails closed if the server is really gone.
//  5. The record returned may be the same one handed to other callers
//     (Valkey decodes a cached record once, not on every replay): callers
//     read it and never modify it, its response's header and body
//     included.
type ReplayCache interface {
	// CachedReplay returns the completed record of id, or nil (the record
	// is not known completed, or not completed any more), and how the
	// answer was found. Errors wrap ErrUnavailable.
	CachedReplay(ctx context.Context, id Identity) (*Record, CacheResult, error)
}

// CachedReplayOf calls s's CachedReplay when s is a ReplayCache and answers
// (nil, CacheSkipped, nil) otherwise; store wrappers (metrics, tracing, a
// store not connected yet) forward with it so they stay ReplayCaches.
func CachedReplayOf(ctx context.Context, s Store, id Identity) (*Record, CacheResult, error) {
	rc, ok := s.(ReplayCache)
	if !ok {
		return nil, CacheSkipped, nil
	}
	return rc.CachedReplay(ctx, id)
}
