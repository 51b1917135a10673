// Package identity says whose operation a keyed request is and which
// record holds it: the idempotency key, the owner (the principal the
// request acts for) and the record's identity (store.Identity: owner,
// scope, key).
//
// It promises:
//
//   - One principal's record is never another's. An owner is derived from
//     what the auth layer vouches for (a trusted header, a hash of the
//     Authorization value, a verified client certificate, the claims of a
//     verified JWT, or several of them as one OwnerList), and each source
//     stores a form with its own prefix (h:, sha256:, cert:, j:, m:), so
//     no value of one source can equal a value of another. A raw
//     credential is never stored.
//   - A request is never given an owner it did not prove. A source field
//     sent twice, an absent one, or a token that is malformed, unsigned by
//     the issuer's keys (JWKS), expired, or for another issuer or audience
//     is an error (ErrOwnerMissing, ErrInvalidCredentials), never a guess
//     and never the empty owner.
//   - A key is what the client sent, checked once (ParseKey, BodyKey): at
//     most MaxKeyLength printable ASCII characters, refused when
//     ambiguous.
//   - The record of a request is derived here and nowhere else
//     (Scoping.Identity, Scoping.Resource): the proxy's claims, the
//     resource index and tombstones, the layout 1 fallback (Layout1) and
//     the admin API's lookups and purges all find the same record.
//     Under upstream.pass_host the host joins the scope, in its canonical
//     origin form (OriginHost).
//
// Who calls what: package policy holds each route's settings (KeySource,
// OwnerSource, JWTSettings) and validates them when it compiles a config;
// Route.KeyOf and Route.OwnerOf apply them to a request. A KeyRing, made
// once per process, owns the JWK Sets across config reloads: the binary
// and the middleware (which the Caddy module builds on) call KeyRing.Bind
// on every compiled policy before it serves (package policy's *Policy is
// a JWTRoutes) and Run in the background; the binary's /readyz asks
// Unready. The proxy derives the
// record with Scoping; the admin API derives an owner from the value an
// operator knows with Route.OwnerFromValue. This package imports neither
// policy nor proxy.
package identity
