package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/problem"
)

// ServeHTTP enforces the route's policy on r: ask the policy, claim, act
// (see the package documentation for the flow). Every request ends in one
// place, the deferred done, whichever way it was answered (a problem, a
// replay, a forward, a passthrough, a client that left while it waited) and
// also when the response is aborted with http.ErrAbortHandler: the steps
// below only set the exchange's outcome and status.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.next != nil && callOf(r.Context()).covers(r) {
		// In process, inside another engine's call of this handler (two
		// middlewares nested): that call's claim covers the request, and
		// a claim of this engine's would wait on it (next.go). Another
		// request made during that call is enforced as any.
		p.next.ServeHTTP(w, r)
		return
	}
	ex := &exchange{start: time.Now(), requestID: p.requestIDs.of(r), r: r}
	defer p.done(ex)
	ex.plan = p.policy().Ask(policyView(r), p.scoping)
	pl := &ex.plan
	ex.route = pl.Route
	ex.aw.ResponseWriter = w
	ex.w = &ex.aw
	w = ex.w
	if p.refuseForm(w, r, ex) {
		return
	}
	if pl.NeedBody {
		// A form or JSON body may carry a _method override that changes
		// the decision: read it once, within the route's limit; the same
		// bytes go upstream. A malformed key is refused first: reading the
		// body sends 100 Continue, and a client told to send it for a
		// request refused anyway wastes the upload (RFC 9110 section
		// 10.1.1).
		if err := pl.KeyErr; err != nil && !errors.Is(err, identity.ErrKeyMissing) {
			p.fail(w, ex, problem.InvalidKey.With(err.Error()))
			return
		}
		if !p.readBody(w, r, ex) {
			return
		}
		pl.Body(ex.body)
		ex.route = pl.Route
	}
	route := ex.route
	// The request as the server read it: trailers sent without a Trailer
	// field land in its Trailer only, not in a copy's (refuseTrailers).
	in := r
	r = r.WithContext(context.WithValue(r.Context(), exchangeKey{}, ex))
	ex.r = r
	if pl.Refuse != "" {
		p.fail(w, ex, problem.Ambiguous.With(pl.Refuse))
		return
	}
	if !route.Enforces(r.Method) || isUpgrade(r) {
		p.passthroughServe(w, r, ex)
		return
	}
	// What the upstream never gets must not decide the owner or the
	// fingerprint: "Connection: Content-Type" would otherwise make two
	// requests the upstream tells apart share one fingerprint.
	removeHopByHop(r.Header)
	// A key in the body (a webhook's event id) needs the body first; it is
	// read within max_request_bytes, and the same bytes go upstream.
	if route.Key.FromBody() && !p.readBody(w, r, ex) {
		return
	}
	pl.Identify(ex.body)
	switch err := pl.KeyErr; {
	case errors.Is(err, identity.ErrKeyMissing):
		if !route.Required {
			p.passthroughServe(w, r, ex)
			return
		}
		p.fail(w, ex, problem.MissingKey.With(missingKeyDetail(route, r)))
		return
	case err != nil:
		p.fail(w, ex, problem.InvalidKey.With(err.Error()))
		return
	}
	err := pl.OwnerErr
	if errors.Is(err, identity.ErrInvalidCredentials) {
		// owner: jwt. Never anonymous: a 401, and nothing goes upstream.
		challenge := `Bearer error="invalid_token"`
		if r.Header.Get("Authorization") == "" {
			challenge = "Bearer" // RFC 6750 section 3.1: no error code without credentials
		}
		w.Header().Set("WWW-Authenticate", challenge)
		p.fail(w, ex, problem.InvalidCredentials.With(
			"the request carries an idempotency key, whose owner is the subject of a verified bearer token, and the token was not accepted: "+err.Error()))
		return
	}
	if err != nil {
		// The field or credential is named ("no owner (header)" used to
		// leave the client guessing which header; TestAdminLookupsAndCLI).
		p.fail(w, ex, problem.MissingOwner.With(
			"the request carries an idempotency key but no owner: "+ownerMissingWhy(route, err)+"; keys are scoped per owner"))
		return
	}
	ex.id = pl.Identity
	if p.refuseTrailers(w, r, in, ex) || !p.readBody(w, r, ex) || p.refuseTrailers(w, r, in, ex) {
		return
	}
	if err := route.Fingerprint.CheckBody(r, ex.body); err != nil {
		ex.cause = err
		p.fail(w, ex, problem.BadRequest.With(err.Error()))
		return
	}
	ex.fp, ex.recipe = route.FingerprintOf(r, ex.body), pl.Recipe
	p.enforce(w, r, ex)
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
	p.m.Request(ex.route.Name, ex.outcome)
	p.m.RequestDuration(ex.route.Name, r.Method, clientStatus(r, ex), time.Since(ex.start))
	if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
		// Guarded: building the attributes costs an allocation per request
		// even for the no-op span when tracing is off.
		span.SetAttributes(attribute.String("idemgate.route", ex.route.Name), attribute.String("idemgate.outcome", ex.outcome))
	}
	p.accessLog(r, ex)
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
// the metadata entry (README, "gRPC": the idempotency-key entry is the
// Idempotency-Key field).
func missingKeyDetail(route *policy.Route, r *http.Request) string {
	if isGRPC(r.Header) && !route.Key.FromBody() {
		return fmt.Sprintf("route %q requires the %s metadata entry on gRPC calls", route.Name, strings.ToLower(route.Header))
	}
	return fmt.Sprintf("route %q requires %s on %s requests", route.Name, route.KeyName(), r.Method)
}
