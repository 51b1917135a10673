package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/idemgate/idemgate/policy"
)

// A handler in process (Options.Next) answers by what it writes, as an
// upstream does: a replayable status is stored, any other releases the
// key. What it writes cannot say two things the engine must know, so it
// tells them with NothingDone and OutcomeUnknown, through the request it
// was given (its context carries the call, so any request derived from
// it, httputil.ReverseProxy's outgoing one included, reaches the same
// call).

// handlerCall is what a handler in process reported of one call of it.
// It is reached from the handler's request context (callKey), also by a
// goroutine the handler left running, hence the lock; reports that come
// after the handler returned (sealed) are ignored.
type handlerCall struct {
	mu sync.Mutex
	// claimed says the call runs under a claim: a report decides what
	// becomes of it. A call forwarded unprotected (fail_open with the
	// store down) holds none, and reports are ignored.
	claimed bool
	sealed  bool
	nothing bool
	// unreachable says the handler could not reach its backend: nothing
	// was done, and the engine answers upstream-unreachable.
	unreachable bool
	unknown     bool
	cause       error
	// header is the header of the request the handler was given, and
	// keyName and keyValues its idempotency key field (none for a key in
	// the body): what tells a nested engine's request (covers). Set
	// before the handler runs and never changed.
	header    http.Header
	keyName   string
	keyValues []string
	// route governs the call (UnknownStatus); set with header.
	route *policy.Route
	// reached says a request made under the call's context got a
	// connection from a real transport (Reached).
	reached atomic.Bool
}

// of records out, the request the handler of c runs, governed by route.
func (c *handlerCall) of(out *http.Request, route *policy.Route) {
	if c == nil {
		return
	}
	c.header, c.route = out.Header, route
	if !route.Key.FromBody() {
		c.keyName, c.keyValues = route.Header, out.Header.Values(route.Header)
	}
}

// covers reports whether r, a request that reaches another engine in
// process during c, is c's own request (two middlewares nested around one
// handler), which c's claim covers: r has the header c's handler was
// given (a router passes the request on, or a shallow copy of it), or the
// same idempotency key field. A request the handler makes of its own (a
// batch endpoint that runs each item, with the item's key, through a
// service under another engine) is not: that engine enforces it
// (TestInnerEngineEnforcesAnotherRequest). Nor is a request of a call
// forwarded unprotected (fail_open with the store down): no claim covers
// it, and the inner engine's route, which did not choose fail_open, or
// whose store is up, enforces it as its own
// (TestNestedInsideAFailOpenCallIsEnforced). Nor, once the handler has
// returned (sealed), is the call's own request that the handler kept and
// serves again (a job queued for later): the claim ended with the call,
// and the request passed through would run the handler again unenforced
// (TestKeptRequestServedAgainAfterItsCallIsEnforced).
func (c *handlerCall) covers(r *http.Request) bool {
	if c == nil || !c.claimed {
		return false
	}
	c.mu.Lock()
	sealed := c.sealed
	c.mu.Unlock()
	if sealed {
		return false
	}
	return c.owns(r)
}

// owns reports whether r is c's own request, passed on (the header c's
// handler was given, or a shallow copy of the request) or made again with
// the same idempotency key field, rather than a request c's handler made
// of its own. c's header and key fields are set before the handler runs
// and never change.
func (c *handlerCall) owns(r *http.Request) bool {
	if reflect.ValueOf(c.header).UnsafePointer() == reflect.ValueOf(r.Header).UnsafePointer() {
		return true
	}
	return len(c.keyValues) > 0 && slices.Equal(r.Header.Values(c.keyName), c.keyValues)
}

// callKey is the request context key of the handler call in progress.
type callKey struct{}

// withCall returns ctx carrying c.
func withCall(ctx context.Context, c *handlerCall) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// callOf returns the handler call ctx belongs to, or nil outside one.
func callOf(ctx context.Context) *handlerCall {
	c, _ := ctx.Value(callKey{}).(*handlerCall)
	return c
}

// report records what the handler said; it reports whether it counts.
func (c *handlerCall) report(said report, cause error) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sealed || !c.claimed {
		return false
	}
	switch said {
	case reportUnknown:
		if !c.unknown {
			c.unknown, c.cause = true, cause
		}
	case reportUnreachable:
		c.nothing = true
		if !c.unknown && !c.unreachable {
			c.unreachable, c.cause = true, cause
		}
	default:
		c.nothing = true
	}
	return true
}

// report is what a handler in process says of its call.
type report int

const (
	reportNothingDone report = iota // NothingDone
	reportUnreachable               // Unreachable
	reportUnknown                   // OutcomeUnknown
)

// seal ends the call: what was reported until now decides, and later
// reports are ignored. A call reported unknown is unknown, whatever else
// it reported (the safe side); one reported unreachable did nothing.
func (c *handlerCall) seal() (sealed sealedCall) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sealed = true
	return sealedCall{
		nothing:     c.nothing && !c.unknown,
		unreachable: c.unreachable && !c.unknown,
		unknown:     c.unknown,
		cause:       c.cause,
	}
}

// sealedCall is what decides a call of a handler in process (seal). A
// call that is unreachable did nothing too (report).
type sealedCall struct {
	nothing, unreachable, unknown bool
	cause                         error
}

// NothingDone tells the engine that runs r's handler in process that the
// handler did nothing the request asked for (it refused it before it
// acted: invalid input, a missing permission, a dependency it could not
// reach before it started): the key is released whatever the handler
// writes (nothing is stored, the answer is sent as written) and a retry
// runs it again. A handler that then panics has its claim released too:
// without this report any panic leaves the outcome unknown, since a panic
// says nothing of what ran before it.
//
// Writing a status that is not stored (a 4xx or 5xx the route does not
// replay) before acting releases the key as well; NothingDone says it
// whatever the status, and before a panic.
//
// It reports whether the report counts: false when r is not a keyed call
// the engine runs under a claim (a request no route enforces, a call
// forwarded unprotected on a fail_open route, a call whose handler has
// returned, or no engine at all). OutcomeUnknown on the same call wins
// over it.
func NothingDone(r *http.Request) bool {
	return callOf(r.Context()).report(reportNothingDone, nil)
}

// Unreachable tells the engine that runs r's handler in process that the
// handler could not reach the backend it hands the request to, and sent
// it nothing (its connection could not be made): the key is released, as
// by NothingDone, and the client is answered what the standalone proxy
// answers for an upstream it could not reach, 502 upstream-unreachable,
// whatever the handler writes, so that every shape answers a dial failure
// alike. cause (nil is allowed) goes to the log and the access line.
// OutcomeUnknown on the same call wins over it. It reports whether the
// report counts, as NothingDone does.
func Unreachable(r *http.Request, cause error) bool {
	if cause == nil {
		cause = errors.New("the handler could not reach its backend")
	}
	return callOf(r.Context()).report(reportUnreachable, cause)
}

// OutcomeUnknown tells the engine that runs r's handler in process that
// the call may have acted and its result is not known (a backend it calls
// took the request and failed before answering; a transaction whose
// commit answer was lost): nothing is stored, whatever the handler
// writes, and the claim is kept until its lease ends, after which
// on_abandoned decides (outcome-unknown, or a takeover), as the proxy
// does for an upstream that failed after the request was sent. The client
// is answered what the proxy answers then: 504 upstream-timeout when
// cause is a timeout (a net.Error whose Timeout is true, or
// context.DeadlineExceeded) or the engine's deadline has passed, 502
// upstream-failed otherwise; cause (nil is allowed) goes to the log and
// the access line.
//
// It reports whether the report counts, as NothingDone does; a handler
// outside a keyed call answers as it would without idemgate.
func OutcomeUnknown(r *http.Request, cause error) bool {
	if cause == nil {
		cause = errors.New("the handler reported an unknown outcome")
	}
	return callOf(r.Context()).report(reportUnknown, cause)
}

// UnknownStatus reports whether code, the status of an answer that the
// handler serving r got from a backend it handed the request to, is one
// the route of r's call lists in unknown_statuses: an answer that says
// nothing of whether the backend acted (a gateway's 504 at its own
// timeout while the application goes on). A handler must then not send
// the request again, to that backend or another, as Caddy's
// reverse_proxy does when lb_retry_match matches the upstream's status
// (TestCaddyRetryAfterUnknownStatusNeverRunsTwice): the first send may
// have acted. False when r is not a keyed call the engine runs under a
// claim.
func UnknownStatus(r *http.Request, code int) bool {
	c := callOf(r.Context())
	// claimed and route are set before the handler runs and never change.
	return c != nil && c.claimed && c.route != nil && c.route.OutcomeUnknown(code)
}

// Reached reports whether a request that the handler serving r made
// under r's context (its own http.Client call, httputil.ReverseProxy's
// outgoing request) got a connection to a backend during the call, so
// that what it sent there may have acted. A dial failure that comes after
// proves nothing of the call as a whole: ReverseProxyErrorHandler of
// package middleware releases the key only when nothing was reached
// (TestReverseProxyDialFailureAfterTheHandlerReachedABackend), as Caddy's
// module does for reverse_proxy. False when r is not a keyed call the
// engine runs under a claim.
func Reached(r *http.Request) bool {
	c := callOf(r.Context())
	return c != nil && c.claimed && c.reached.Load()
}

// isTimeout reports whether err says that something did not answer in
// time: context.DeadlineExceeded, or a net.Error that is a timeout (a
// response header timeout, a dial or read deadline).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
