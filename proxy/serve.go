package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/fingerprint"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/problem"
)

// ServeHTTP enforces the route's policy on r, top to bottom: refuse what
// the header already condemns, read the body once, resolve the plan with
// it, enforce (see the package documentation for the flow). Every request
// ends in one place, the deferred done, whichever way it was answered (a
// problem, a replay, a forward, a passthrough, a client that left while it
// waited) and also when the response is aborted with
// http.ErrAbortHandler: the steps below only set the exchange's outcome
// and status.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.serve(w, r, p.next)
}

// ServeNext is ServeHTTP on an engine in process (Options.Next set) with
// next as the handler of this request instead of Options.Next: one Proxy,
// and its waiter slots, store admission, store health and pending
// completions, serves every handler a middleware wraps, however often it
// wraps them (gorilla/mux's Use wraps the matched handler on every
// request; TestMiddlewareWrappedPerRequestSharesOneEngine).
func (p *Proxy) ServeNext(w http.ResponseWriter, r *http.Request, next http.Handler) {
	p.serve(w, r, next)
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if next != nil && callOf(r.Context()).covers(r) {
		// In process, inside another engine's call of this handler (two
		// middlewares nested): that call's claim covers the request, and
		// a claim of this engine's would wait on it (next.go). Another
		// request made during that call is enforced as any.
		next.ServeHTTP(w, r)
		return
	}
	ex := &exchange{start: time.Now(), next: next}
	if next != nil {
		ex.sent = sentURL(r)
	}
	ex.requestID = p.requestIDs.of(r, &ex.requestIDField)
	defer p.done(ex)
	ex.aw.ResponseWriter = w
	ex.w = &ex.aw
	w = ex.w
	// The policy is asked once, about what the upstream will get, by its
	// header: the route, and whether the decision awaits the body.
	up := upstreamView(r, ex)
	ex.plan = p.policy().Ask(up, p.scoping)
	pl := &ex.plan
	ex.route = pl.Route

	// Refuse what no upstream may get, and what the header settles:
	// refused, passed through, or keyed with a malformed key, before the
	// body is read (reading it sends 100 Continue, and a client told to
	// send it for a request refused anyway wastes the upload, RFC 9110
	// section 10.1.1).
	if p.refuseForm(w, r, ex) || p.answerVerdict(w, ex, verdictOf(pl, up, r, false)) {
		return
	}
	// Read the body once, within the route's limit; the same bytes go
	// upstream.
	if !p.readBody(w, up, ex) {
		return
	}
	// Resolve what the body fixes: the decision a _method member may
	// change, a key in the body, the fingerprint.
	pl.Resolve(ex.body)
	ex.route = pl.Route
	if p.answerVerdict(w, ex, verdictOf(pl, up, r, true)) {
		return
	}
	// Enforce.
	ex.id, ex.fp, ex.recipe = pl.Identity, pl.Fingerprint, pl.Recipe
	p.enforce(w, up, ex)
}

// verdict is what the plan says becomes of a request, at either step
// (verdictOf): go on, pass it through unenforced, or answer a problem.
type verdict struct {
	step verdictStep
	// problem answers a refusal, with cause for the access line and, on
	// an invalid_credentials refusal, challenge as WWW-Authenticate.
	problem   problem.Details
	cause     error
	challenge string
}

// verdictStep is a verdict's kind.
type verdictStep int

const (
	// goOn: read the body (after Ask) or enforce (after Resolve).
	goOn verdictStep = iota
	// passThrough: the route does not enforce the request; it goes
	// upstream untouched.
	passThrough
	// refuse: answer the problem; nothing goes upstream.
	refuse
)

// refusal is the verdict that answers pr.
func refusal(pr problem.Details) verdict { return verdict{step: refuse, problem: pr} }

// verdictOf says what becomes of the request of pl, as the upstream will get
// it (up) and as it came (in), once the policy was asked (resolved false)
// or once the plan was resolved with the body (true). It is pure: the same
// checks, in the same order, at both steps, each made once it can be (a
// key in the body is decided after the body, so a request without it on a
// route where it is optional passes through even with trailers).
func verdictOf(pl *policy.Plan, up, in *http.Request, resolved bool) verdict {
	route := pl.Route
	if pl.NeedBody {
		// The decision awaits the body, which may carry a _method member;
		// a malformed key in the field of the route so far is refused
		// before it is read.
		if err := pl.KeyErr; err != nil && !errors.Is(err, identity.ErrKeyMissing) {
			return refusal(problem.InvalidKey.With(err.Error()))
		}
		return verdict{step: goOn}
	}
	if pl.Refuse != "" {
		return refusal(problem.Ambiguous.With(pl.Refuse))
	}
	// A protocol switch is decided as it came: the view has no Upgrade.
	if !pl.Enforced || isUpgrade(in) {
		return verdict{step: passThrough}
	}
	if pl.KeyInBody && !resolved {
		return verdict{step: goOn}
	}
	switch err := pl.KeyErr; {
	case errors.Is(err, identity.ErrKeyMissing):
		if !route.Required {
			return verdict{step: passThrough}
		}
		return refusal(problem.MissingKey.With(missingKeyDetail(route, up)))
	case err != nil:
		return refusal(problem.InvalidKey.With(err.Error()))
	}
	if err := pl.OwnerErr; errors.Is(err, identity.ErrInvalidCredentials) {
		// owner: jwt. Never anonymous: a 401, and nothing goes upstream.
		v := refusal(problem.InvalidCredentials.With(
			"the request carries an idempotency key, whose owner is the subject of a verified bearer token, and the token was not accepted: " + err.Error()))
		v.challenge = `Bearer error="invalid_token"`
		if up.Header.Get("Authorization") == "" {
			v.challenge = "Bearer" // RFC 6750 section 3.1: no error code without credentials
		}
		return v
	} else if err != nil {
		// The field or credential is named ("no owner (header)" used to
		// leave the client guessing which header; TestAdminLookupsAndCLI).
		return refusal(problem.MissingOwner.With(
			"the request carries an idempotency key but no owner: " + ownerMissingWhy(route, err) + "; keys are scoped per owner"))
	}
	if names := requestTrailers(up, in); names != nil {
		return refusal(problem.RequestTrailers.With(
			"the request carries the trailer fields " + strings.Join(names, ", ") +
				" after its body; trailers are not part of the request's fingerprint, so a retry with other values could not be told apart from this request; send them as header fields"))
	}
	if err := pl.FingerprintErr; resolved && err != nil {
		v := refusal(problem.BadRequest.With(err.Error()))
		v.cause = err
		return v
	}
	return verdict{step: goOn}
}

// answerVerdict carries out v and reports whether it answered the request: a
// passthrough (with the request as it came, verdictOf's in) or a problem.
func (p *Proxy) answerVerdict(w http.ResponseWriter, ex *exchange, v verdict) bool {
	switch v.step {
	case passThrough:
		p.passthroughServe(w, ex.passthroughRequest(), ex)
	case refuse:
		if v.challenge != "" {
			w.Header().Set("WWW-Authenticate", v.challenge)
		}
		if v.cause != nil {
			ex.cause = v.cause
		}
		p.fail(w, ex, v.problem)
	default:
		return false
	}
	return true
}

// ownerMissingWhy says which owner source yielded nothing, from OwnerOf's
// error ("header X-User is absent or empty", "no verified client
// certificate", ...).
func ownerMissingWhy(route *policy.Route, err error) string {
	if why, ok := strings.CutPrefix(err.Error(), identity.ErrOwnerMissing.Error()+": "); ok {
		return why + " (owner: " + route.Owner.String() + ")"
	}
	return "owner: " + route.Owner.String()
}

// done records one finished request, once, deferred by ServeHTTP: the
// metric, the request span's route and outcome (a no-op without a
// recording span; see package tracing) and the access log line. Neither
// the raw key nor the owner is logged or traced, only a short hash of the
// key in the log.
func (p *Proxy) done(ex *exchange) {
	r := ex.r
	// One clock read ends the request for the metric and the access line.
	now := time.Now()
	p.m.Request(ex.route.Name, ex.outcome)
	p.m.RequestDuration(ex.route.Name, r.Method, clientStatus(r, ex), now.Sub(ex.start))
	if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
		// Guarded: building the attributes costs an allocation per request
		// even for the no-op span when tracing is off.
		span.SetAttributes(attribute.String("idemgate.route", ex.route.Name), attribute.String("idemgate.outcome", ex.outcome))
	}
	p.accessLog(r, ex, now)
}

// clientStatus is the status the client was sent: what reached the
// writer, else the exchange's own (a client that left: 499), else 101 for
// a protocol switch, whose response the writer does not count, else
// net/http's implicit 200.
func clientStatus(r *http.Request, ex *exchange) int {
	switch {
	case ex.w != nil && ex.w.status != 0:
		return ex.w.status
	case ex.status != 0:
		return ex.status
	case isUpgrade(r):
		return http.StatusSwitchingProtocols
	}
	return http.StatusOK
}

// missingKeyDetail is the detail of a missing-key problem: what the route
// takes the key from, in the caller's terms. A gRPC caller sets metadata,
// not header fields, and every call is a POST it never wrote: it is told
// the metadata entry (docs/grpc.md: the idempotency-key entry is the
// Idempotency-Key field).
func missingKeyDetail(route *policy.Route, r *http.Request) string {
	if isGRPC(r.Header) && !route.Key.FromBody() {
		return fmt.Sprintf("route %q requires the %s metadata entry on gRPC calls", route.Name, strings.ToLower(route.Header))
	}
	return fmt.Sprintf("route %q requires %s on %s requests", route.Name, route.KeyName(), r.Method)
}

// sentURL returns the URL r was sent with when a handler in front of an
// engine in process rewrote r.URL, nil when r.URL is it: the one the
// host put in r's context (fingerprint.SentURLKey: Caddy's module, whose
// rewrites change r.RequestURI too), else r.RequestURI as the server read
// it, which http.StripPrefix leaves as it was. Two endpoints mounted under
// two prefixes must not be one request to the fingerprint
// (fingerprint.SentURLKey).
//
// An engine's own exchange answers fingerprint.SentURLKey with its sent
// URL to every request made under its context, so a value that is the
// enclosing exchange's is that exchange's request's, not r's: a request a
// handler builds of its own (a batch's item, http.NewRequestWithContext
// with the batch's context) would take the batch's URL as the client sent
// it, and two items with one key and two URLs would be one request to the
// fingerprint (TestItemRequestsOfAStrippedBatchKeepTheirOwnURL). The
// enclosing request passed on reaches here only when no claim covers it,
// and its RequestURI, which a router keeps, still tells. A request the
// handler of an enclosing call made of its own is sent with its URL: a
// clone of the call's request keeps that request's RequestURI, which is
// not the clone's (TestItemRequestsClonedFromABatchKeepTheirOwnURL).
func sentURL(r *http.Request) *url.URL {
	if c := callOf(r.Context()); c != nil && !c.owns(r) {
		return nil
	}
	if u, _ := r.Context().Value(fingerprint.SentURLKey{}).(*url.URL); u != nil {
		if outer := exchangeOf(r.Context()); outer == nil || outer.sent != u {
			return u
		}
	}
	if r.URL == nil || r.RequestURI == "" || r.RequestURI == "*" || sameTarget(r.RequestURI, r.URL) {
		return nil
	}
	u, err := url.ParseRequestURI(r.RequestURI)
	if err != nil {
		return nil
	}
	return u
}

// sameTarget reports whether the request target uri (origin form) is u's
// path and query, without building u's: the common case of a request no
// handler rewrote costs nothing.
func sameTarget(uri string, u *url.URL) bool {
	path := u.EscapedPath()
	if u.RawQuery == "" && !u.ForceQuery {
		return uri == path
	}
	return len(uri) == len(path)+1+len(u.RawQuery) && strings.HasPrefix(uri, path) &&
		uri[len(path)] == '?' && strings.HasSuffix(uri, u.RawQuery)
}
