package policy

import (
	"fmt"
	"net/http"

	"github.com/idemgate/idemgate/policy/identity"
)

// KeyOf returns the idempotency key of req per the route's key source:
// ParseKey of the Header field, or, for a body key, the member of the JSON
// body (the complete body bytes) at the pointer (identity.BodyKey).
func (r *Route) KeyOf(req *http.Request, body []byte) (string, error) {
	if r.Key.FromBody() {
		return identity.BodyKey(body, r.Key.Pointer)
	}
	return identity.ParseKey(req.Header.Values(r.Header))
}

// KeyName says where a route's key is read, for problem details and the
// published policy: "the Idempotency-Key field" or "the JSON body member
// /id".
func (r *Route) KeyName() string {
	if r.Key.FromBody() {
		return "the JSON body member " + r.Key.Pointer
	}
	return "the " + r.Header + " field"
}

// OwnerOf returns the owner value of req per r.Owner (OwnerSource.Of),
// jwt tokens verified by the verifier KeyRing.Bind gave r. It returns
// identity.ErrOwnerMissing when the source yields no value, and
// identity.ErrInvalidCredentials (wrapped) when owner: jwt finds no
// acceptable bearer token.
func (r *Route) OwnerOf(req *http.Request) (string, error) {
	return r.Owner.Of(req, r.jwt)
}

// OwnerFromValue derives the stored owner of r from raw, the value an
// operator knows (the admin API's owner_value), exactly as OwnerOf does
// for a request, so the result finds the record (OwnerSource.FromValue).
func (r *Route) OwnerFromValue(raw string) (string, error) {
	return r.Owner.FromValue(raw, r.jwtClaims())
}

// StoredOwnerForm describes the stored owner of r's source, for errors that
// must tell an operator what to send: e.g. "h:VALUE (the X-User field's
// value)".
func (r *Route) StoredOwnerForm() string { return r.Owner.StoredForm(r.jwtClaims()) }

// HasStoredOwnerForm reports whether owner has the prefix of r's source, so
// that a value given in another form (owner=carol on a header:X-User
// route) is refused with a hint instead of answering "not found".
func (r *Route) HasStoredOwnerForm(owner string) bool { return r.Owner.HasStoredForm(owner) }

// jwtClaims are the claims r's jwt owners are made of.
func (r *Route) jwtClaims() []string {
	if r.JWT == nil {
		return identity.DefaultJWTClaims()
	}
	return r.JWT.Claims
}

// RecordScope returns r's own key scope, Scope, for identity.Scoping.
func (r *Route) RecordScope() string { return r.Scope }

// JWTRoutes returns the routes of p as an identity.KeyRing binds them
// (identity.JWTRoutes): the defaults first, then the routes in file order,
// each Field error a *FieldError at "defaults" or "routes[i]". Nil for a
// nil p.
func (p *Policy) JWTRoutes() []identity.JWTRoute {
	if p == nil {
		return nil
	}
	out := make([]identity.JWTRoute, 0, len(p.routes)+1)
	add := func(path string, r *Route) {
		out = append(out, identity.JWTRoute{
			Name:     r.Name,
			Defaults: r == p.defaults,
			Owner:    r.Owner,
			JWT:      r.JWT,
			Field:    func(suffix string, err error) error { return &FieldError{Path: path + suffix, Err: err} },
			Use:      func(v *identity.JWTVerifier) { r.jwt = v },
		})
	}
	if p.defaults != nil {
		add("defaults", p.defaults)
	}
	for i, r := range p.routes {
		add(fmt.Sprintf("routes[%d]", i), r)
	}
	return out
}
