package policy

import (
	"net/http"
	"slices"

	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/store"
)

// Plan is the policy's answer for one request, as the upstream will get
// it: the route, why it is refused, the resources it tombstones, the key,
// the owner, the record's identity with its scope and canonical host, the
// fingerprint and its recipe. Each is computed once, by the first of two
// steps that has what it needs:
//
//   - Policy.Ask, from the request's header, before the body is read: the
//     route decision and, unless it awaits the body (NeedBody), the
//     tombstone rules and, for a request the route enforces, the recipe,
//     the owner, and with a key in a header field the key and the
//     identity, so that a request the header already refuses or passes
//     through is settled before its body is read.
//   - Resolve, once the body is read: with NeedBody the decision with the
//     body (Policy.DecideBody) and then all of the above; a key in the
//     body (key.from: body) and the identity; and the fingerprint.
//
// The request given to Ask is what the upstream will get (no hop-by-hop
// field, no field its Connection field names): what the upstream never
// gets decides neither the route, nor the owner, nor the fingerprint
// (TestAttackOwnerFieldNamedByConnectionIsNoOwner), and it does not
// change between the steps. An owner is computed once per owner source,
// for the request's route and the tombstone rules together, so a JWT is
// verified once per request (TestJWTVerifiedOncePerRequest).
//
// A Plan belongs to one request and is not safe for concurrent use. The
// zero value is not a plan: start one with Policy.Ask.
type Plan struct {
	// Decision is the route decision (Policy.Decide; Policy.DecideBody
	// once Resolve had the body of a decision with NeedBody).
	Decision
	// Tombstones are the resources a 2xx answer to the request would
	// tombstone (resource_from, tombstone_methods;
	// identity.Scoping.Resource): for each route with resource_from that
	// lists the request's method, the request's owner as that route
	// computes it, and its cleaned path; a route for which the request
	// carries no owner contributes none. Nil for almost every request.
	// Set once the decision is final and not refused.
	Tombstones []store.Resource
	// Enforced reports that the route enforces the request: the decision
	// is final and not refused, and the route's mode and methods enforce
	// the request's method (Route.Enforces). KeyInBody reports that the
	// route then reads the key from the body (key.from: body), so that
	// Key waits for Resolve.
	Enforced  bool
	KeyInBody bool
	// Key is the request's idempotency key as stored, and KeyErr why there
	// is none (identity.ErrKeyMissing, or wrapping identity.ErrKeyInvalid);
	// Route.KeyOf. Set for a request the route enforces: by Ask for a key
	// in a header field, by Resolve for one in the body. While NeedBody is
	// set they are those of the provisional route's header field, so that
	// a malformed key is refused before the body is read; Resolve sets
	// them again for the final route.
	Key    string
	KeyErr error
	// Owner is the request's owner as Route.OwnerOf computes it, and
	// OwnerErr why there is none; set for a request the route enforces,
	// with a key in a header field only when KeyErr is nil.
	Owner    string
	OwnerErr error
	// Identity is the identity of the request's record
	// (identity.Scoping.Identity: owner, the route's scope with the
	// canonical host under pass_host, key); set when KeyErr and OwnerErr
	// are nil.
	Identity store.Identity
	// Recipe is the route's fingerprint recipe (Route.Recipe), and
	// Fingerprint the request's fingerprint under it
	// (Route.FingerprintOf); FingerprintErr is why the body cannot be
	// fingerprinted (fingerprint.Spec.CheckBody: a protobuf body that
	// does not decode). Recipe is set with Enforced; Fingerprint and
	// FingerprintErr by Resolve, once Identity is set.
	Recipe         string
	Fingerprint    string
	FingerprintErr error

	policy  *Policy
	req     *http.Request
	scoping identity.Scoping
}

// Ask starts the plan for r, the request as the upstream will get it,
// under scoping, from r's header alone: the route decision (Decide) and,
// unless it awaits the body, what the header fixes (see Plan).
func (p *Policy) Ask(r *http.Request, s identity.Scoping) Plan {
	pl := Plan{Decision: p.Decide(r), policy: p, req: r, scoping: s}
	if pl.NeedBody {
		pl.Key, pl.KeyErr = identity.ParseKey(r.Header.Values(pl.Route.Header))
		return pl
	}
	pl.fromHeader()
	return pl
}

// Resolve finishes the plan with the request body as read (the same
// bytes go upstream): what Ask left for the body (see Plan). It is called
// once, and only for a request whose body was read: one whose decision
// awaits it (NeedBody), or one its route enforces that Ask did not find
// refused.
func (pl *Plan) Resolve(body []byte) {
	if pl.NeedBody {
		pl.Decision = pl.policy.DecideBody(pl.req, body)
		pl.Key, pl.KeyErr = "", nil
		pl.fromHeader()
	}
	route, r := pl.Route, pl.req
	if !pl.Enforced {
		return
	}
	if pl.KeyInBody {
		pl.Key, pl.KeyErr = identity.BodyKey(body, route.Key.Pointer)
		pl.identify()
	}
	if pl.KeyErr != nil || pl.OwnerErr != nil {
		return
	}
	if pl.FingerprintErr = route.Fingerprint.CheckBody(r, body); pl.FingerprintErr == nil {
		pl.Fingerprint = route.FingerprintOf(r, body)
	}
}

// fromHeader computes what the request's header fixes once the decision
// is final: for a request the route enforces the recipe, the owner and,
// with a key in a header field, the key and the identity; the tombstone
// rules, with the owner shared between the route and the rules.
func (pl *Plan) fromHeader() {
	if pl.Refuse != "" || pl.req == nil || pl.req.URL == nil {
		return
	}
	var owners owners
	route := pl.Route
	pl.Enforced = route.Enforces(pl.req.Method)
	if pl.Enforced {
		pl.KeyInBody = route.Key.FromBody()
		pl.Recipe = route.Recipe()
		if !pl.KeyInBody {
			pl.Key, pl.KeyErr = identity.ParseKey(pl.req.Header.Values(route.Header))
		}
		// A key in the body is read after the owner: the owner does not
		// depend on it, and the tombstone rules may share it.
		if pl.KeyErr == nil {
			pl.Owner, pl.OwnerErr = owners.of(route, pl.req)
			if !pl.KeyInBody {
				pl.identify()
			}
		}
	}
	pl.Tombstones = pl.tombstones(&owners)
}

// identify sets Identity when the plan has a key and an owner.
func (pl *Plan) identify() {
	if pl.KeyErr == nil && pl.OwnerErr == nil {
		pl.Identity = pl.scoping.Identity(pl.Route, pl.Owner, pl.Key, pl.origin())
	}
}

// tombstones computes Plan.Tombstones, each owner source's owner computed
// once with owners.
func (pl *Plan) tombstones(owners *owners) []store.Resource {
	r := pl.req
	routes := pl.policy.TombstonesFor(r.Method)
	if routes == nil {
		return nil
	}
	path := CleanPath(r.URL.Path)
	at := pl.origin()
	var out []store.Resource
	for _, route := range routes {
		owner, err := owners.of(route, r)
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

// origin is where the request was sent, as the record identity reads it.
func (pl *Plan) origin() identity.Origin {
	return identity.Origin{Host: pl.req.Host, HTTPS: pl.req.TLS != nil}
}

// owners are the owners one request's plan computed, by owner source
// (sameOwner), so that each source's owner, a JWT's above all, is computed
// once per request; past len(computed) sources the others are computed
// anew. The request does not change under a plan (Plan), so an owner
// computed once holds.
type owners struct {
	computed [4]struct {
		route *Route
		owner string
		err   error
	}
	n int
}

// of is route.OwnerOf(r), computed once per owner source.
func (o *owners) of(route *Route, r *http.Request) (string, error) {
	for _, c := range o.computed[:o.n] {
		if sameOwner(c.route, route) {
			return c.owner, c.err
		}
	}
	owner, err := route.OwnerOf(r)
	if o.n < len(o.computed) {
		c := &o.computed[o.n]
		c.route, c.owner, c.err = route, owner, err
		o.n++
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
