package policy

import (
	"net/http"
	"slices"

	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/store"
)

// Plan is the policy's answer for one request: everything the proxy needs
// to act on it (the route, why it is refused, the resources it tombstones,
// the key, the owner, the record's identity with its scope and canonical
// host, the fingerprint recipe), each computed once. Policy.Ask starts it
// from the request as received; the steps that need more than that take
// only what is new, and fill in the same value:
//
//   - Body, when NeedBody is set: the decision with the body at hand (a
//     _method member of a form or JSON body; Policy.DecideBody).
//   - Identify, for a request the route enforces, once the proxy has
//     removed the hop-by-hop fields (what the upstream never gets must not
//     decide the owner) and read a body the key comes from: Key, Owner,
//     Identity and Recipe.
//
// An owner the tombstone rules already computed is not computed again by
// Identify while the fields it was read from are unchanged, so a JWT is
// verified once per request (TestJWTVerifiedOncePerRequest).
//
// A Plan belongs to one request and is not safe for concurrent use. The
// zero value is not a plan: start one with Policy.Ask.
type Plan struct {
	// Decision is the route decision (Policy.Decide, Policy.DecideBody).
	Decision
	// Tombstones are the resources a 2xx answer to the request would
	// tombstone (resource_from, tombstone_methods; identity.Scoping.Resource): for
	// each route with resource_from that lists the request's method, the
	// request's owner as that route computes it on the request Ask was
	// given (the proxy gives what the upstream will get: no field named in
	// Connection), and its cleaned path; a route for which the request
	// carries no owner contributes none. Nil for almost every request. Set once the
	// decision is final and not refused.
	Tombstones []store.Resource
	// Key is the request's idempotency key as stored, and KeyErr why there
	// is none (identity.ErrKeyMissing, or wrapping identity.ErrKeyInvalid); Route.KeyOf. Ask
	// and Body set them, from the route's Header field, for a decision that
	// needs the body (a malformed key is refused before the body is read);
	// Identify sets them per the route's key source.
	Key    string
	KeyErr error
	// Owner is the request's owner as Route.OwnerOf computes it, and
	// OwnerErr why there is none; set by Identify when KeyErr is nil.
	Owner    string
	OwnerErr error
	// Identity is the identity of the request's record
	// (identity.Scoping.Identity: owner, the route's scope with the canonical host
	// under pass_host, key); set by Identify when KeyErr and OwnerErr are
	// nil.
	Identity store.Identity
	// Recipe is the route's fingerprint recipe (Route.Recipe); set by
	// Identify.
	Recipe string

	policy  *Policy
	req     *http.Request
	scoping identity.Scoping
	// keyRoute is the route whose Header field Key was parsed from (nil:
	// not parsed), and keyFields how many values it had, so that Identify
	// parses it again only for another route or a changed field (the proxy
	// removed it as hop-by-hop).
	keyRoute  *Route
	keyFields int
	// owners are the owners computed so far, by owner source; a plan with
	// more distinct sources than this holds computes the others anew.
	owners  [4]ownerMemo
	nOwners int
}

// ownerMemo is one owner computed for a request: by route's owner source,
// the answer, and how many values the fields it read held then.
type ownerMemo struct {
	route  *Route
	owner  string
	err    error
	fields int
}

// Ask starts the plan for r as received, under scoping: the route decision
// without the body (Decide) and, when it is final and not refused, the
// tombstone rules. See Plan for the steps that follow.
func (p *Policy) Ask(r *http.Request, s identity.Scoping) Plan {
	pl := Plan{Decision: p.Decide(r), policy: p, req: r, scoping: s}
	pl.applyDecision()
	return pl
}

// Body finishes a decision whose NeedBody was set with the request body
// as read (DecideBody), then what Ask does for a final decision.
func (pl *Plan) Body(body []byte) {
	pl.Decision = pl.policy.DecideBody(pl.req, body)
	pl.applyDecision()
}

// applyDecision fills in what the decision fixes: the key that a body read must
// not wait for, while the decision needs the body; the tombstone rules once
// it is final and not refused.
func (pl *Plan) applyDecision() {
	switch {
	case pl.NeedBody:
		pl.parseHeaderKey()
	case pl.Refuse == "" && pl.req != nil && pl.req.URL != nil:
		pl.Tombstones = pl.tombstones()
	}
}

// parseHeaderKey parses the route's Header field into Key and KeyErr.
func (pl *Plan) parseHeaderKey() {
	vs := pl.req.Header.Values(pl.Route.Header)
	pl.Key, pl.KeyErr = identity.ParseKey(vs)
	pl.keyRoute, pl.keyFields = pl.Route, len(vs)
}

// tombstones computes Plan.Tombstones.
func (pl *Plan) tombstones() []store.Resource {
	r := pl.req
	routes := pl.policy.TombstonesFor(r.Method)
	if routes == nil {
		return nil
	}
	path := CleanPath(r.URL.Path)
	at := pl.origin()
	var out []store.Resource
	for _, route := range routes {
		owner, err := pl.ownerOf(route)
		if err != nil {
			continue
		}
		res := pl.scoping.Resource(route, owner, path, at)
		if !slices.Contains(out, res) {
			out = append(out, res)
		}
	}
	return out
}

// Identify computes, for a request its route enforces, Key and KeyErr per
// the route's key source (body is the request body as read, for a key in
// the body), then, with a key, Owner and OwnerErr, and, with an owner,
// Identity; Recipe always. The proxy calls it once it has removed the
// hop-by-hop fields from the request's header.
func (pl *Plan) Identify(body []byte) {
	route, r := pl.Route, pl.req
	pl.Recipe = route.Recipe()
	switch {
	case route.Key.FromBody():
		pl.Key, pl.KeyErr = identity.BodyKey(body, route.Key.Pointer)
	case pl.keyRoute != route || len(r.Header.Values(route.Header)) != pl.keyFields:
		pl.parseHeaderKey()
	}
	if pl.KeyErr != nil {
		return
	}
	pl.Owner, pl.OwnerErr = pl.ownerOf(route)
	if pl.OwnerErr != nil {
		return
	}
	pl.Identity = pl.scoping.Identity(route, pl.Owner, pl.Key, pl.origin())
}

// origin is where the request was sent, as the record identity reads it.
func (pl *Plan) origin() identity.Origin {
	return identity.Origin{Host: pl.req.Host, HTTPS: pl.req.TLS != nil}
}

// ownerOf is route.OwnerOf for the plan's request, computed once per owner
// source: an owner computed before for the same source is reused while
// the fields it was read from hold as many values as then (the proxy only
// ever removes fields, the hop-by-hop ones, between two asks).
func (pl *Plan) ownerOf(route *Route) (string, error) {
	h := pl.req.Header
	for i := range pl.owners[:pl.nOwners] {
		m := &pl.owners[i]
		if sameOwner(m.route, route) {
			if ownerFieldValues(route.Owner, h) == m.fields {
				return m.owner, m.err
			}
			m.owner, m.err = route.OwnerOf(pl.req)
			m.route, m.fields = route, ownerFieldValues(route.Owner, h)
			return m.owner, m.err
		}
	}
	owner, err := route.OwnerOf(pl.req)
	if pl.nOwners < len(pl.owners) {
		pl.owners[pl.nOwners] = ownerMemo{route: route, owner: owner, err: err, fields: ownerFieldValues(route.Owner, h)}
		pl.nOwners++
	}
	return owner, err
}

// sameOwner reports whether routes a and b compute the same owner of any
// request: the same route, or owner sources alike in every respect, and
// for owner: jwt one bound verifier (identity.KeyRing.Bind gives routes with the
// same jwt settings one). A source of unknown kind, or a jwt route not
// bound yet, is only the same as itself: their errors name the route.
func sameOwner(a, b *Route) bool {
	if a == b {
		return true
	}
	if !sameOwnerSource(a.Owner, b.Owner) {
		return false
	}
	return !a.Owner.Uses(identity.OwnerJWT) || a.jwt != nil && a.jwt == b.jwt
}

func sameOwnerSource(a, b identity.OwnerSource) bool {
	switch a.Kind {
	case identity.OwnerNone, identity.OwnerAuthorization, identity.OwnerJWT, identity.OwnerClientCert:
		return a.Kind == b.Kind
	case identity.OwnerHeader:
		return b.Kind == identity.OwnerHeader && a.Header == b.Header
	case identity.OwnerList:
		return b.Kind == identity.OwnerList && slices.EqualFunc(a.Parts, b.Parts, sameOwnerSource)
	}
	return false
}

// ownerFieldValues counts the values of the header fields owner source o reads
// in h (the Authorization field, or the named header; a part read twice
// counts twice). Fields are only ever removed from a request's header, so
// an unchanged count means unchanged fields.
func ownerFieldValues(o identity.OwnerSource, h http.Header) int {
	switch o.Kind {
	case identity.OwnerHeader:
		return len(h.Values(o.Header))
	case identity.OwnerAuthorization, identity.OwnerJWT:
		return len(h.Values("Authorization"))
	case identity.OwnerList:
		n := 0
		for _, part := range o.Parts {
			n += ownerFieldValues(part, h)
		}
		return n
	}
	return 0
}
