package policy

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/jwttest"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/store"
)

// TestPlanAsksOnce: Ask gives, from the header, what Decide,
// TombstonesFor, KeyOf, OwnerOf, identity.Scoping.Identity and Recipe give
// for the same request; Resolve adds the fingerprint FingerprintOf gives
// with the body, and changes nothing Ask gave.
func TestPlanAsksOnce(t *testing.T) {
	d := DefaultRoute()
	d.Methods = []string{"POST", "DELETE"}
	d.Owner = identity.OwnerSource{Kind: identity.OwnerHeader, Header: "X-User"}
	d.ResourceFrom = ResourceFromLocation
	d.TombstoneMethods = []string{"DELETE"}
	del := d
	del.Name, del.Match, del.ResourceFrom, del.TombstoneMethods = "deletes", "DELETE /v1/orders/{id}", "", nil
	p, err := New(d, []Route{del})
	if err != nil {
		t.Fatal(err)
	}
	s := identity.Scoping{PassHost: true}
	r := httptest.NewRequest("DELETE", "http://Shop.Example.:80/v1/orders/./7", nil)
	r.Header.Set("X-User", "alice")
	r.Header.Set("Idempotency-Key", `"k1"`)

	pl := p.Ask(r, s)
	if pl.Route.Name != "deletes" || pl.Refuse != "" || pl.NeedBody {
		t.Fatalf("decision = %s %q %v, want route deletes", pl.Route.Name, pl.Refuse, pl.NeedBody)
	}
	want := []store.Resource{{Owner: identity.HeaderOwner("alice"), Scope: DefaultScope + "@shop.example", Path: "/v1/orders/7"}}
	if len(pl.Tombstones) != 1 || pl.Tombstones[0] != want[0] {
		t.Fatalf("tombstones = %+v, want %+v", pl.Tombstones, want)
	}
	wantID := store.Identity{Owner: identity.HeaderOwner("alice"), Scope: DefaultScope + "@shop.example", Key: "k1"}
	if pl.KeyErr != nil || pl.OwnerErr != nil || pl.Identity != wantID || pl.Recipe != pl.Route.Recipe() {
		t.Fatalf("ask = %v %v %+v %q, want %+v", pl.KeyErr, pl.OwnerErr, pl.Identity, pl.Recipe, wantID)
	}
	if pl.Fingerprint != "" {
		t.Fatalf("fingerprint %q before the body was read", pl.Fingerprint)
	}
	asked := pl
	pl.Resolve(nil)
	if pl.FingerprintErr != nil || pl.Fingerprint != pl.Route.FingerprintOf(r, nil) {
		t.Fatalf("resolve: fingerprint %q %v, want %q", pl.Fingerprint, pl.FingerprintErr, pl.Route.FingerprintOf(r, nil))
	}
	if pl.Identity != asked.Identity || pl.Route != asked.Route || len(pl.Tombstones) != 1 {
		t.Fatalf("resolve changed what Ask gave: %+v, was %+v", pl.Identity, asked.Identity)
	}
}

// TestPlanKeyInBody: a key in the body is resolved with the body, after
// the owner Ask computed from the header; without it the plan has
// identity.ErrKeyMissing and no identity.
func TestPlanKeyInBody(t *testing.T) {
	d := DefaultRoute()
	d.Owner = identity.OwnerSource{Kind: identity.OwnerHeader, Header: "X-User"}
	d.Key = identity.KeySource{From: identity.KeyFromBody, Pointer: "/id"}
	p, err := New(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"id":"evt_1"}`
	r := httptest.NewRequest("POST", "http://x/v1/hooks", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-User", "alice")
	pl := p.Ask(r, identity.Scoping{})
	if pl.NeedBody || pl.Key != "" || pl.KeyErr != nil || pl.Owner != identity.HeaderOwner("alice") || pl.Identity != (store.Identity{}) {
		t.Fatalf("ask = %v %q %v %q %+v, want the owner alone", pl.NeedBody, pl.Key, pl.KeyErr, pl.Owner, pl.Identity)
	}
	pl.Resolve([]byte(body))
	if pl.Key != "evt_1" || pl.Identity.Key != "evt_1" || pl.Identity.Owner != identity.HeaderOwner("alice") || pl.Fingerprint == "" {
		t.Fatalf("resolve = %q %+v %q, want key evt_1", pl.Key, pl.Identity, pl.Fingerprint)
	}
	pl = p.Ask(r, identity.Scoping{})
	pl.Resolve([]byte(`{}`))
	if !errors.Is(pl.KeyErr, identity.ErrKeyMissing) || pl.Identity != (store.Identity{}) || pl.Fingerprint != "" {
		t.Fatalf("without the member: %v %+v %q, want identity.ErrKeyMissing", pl.KeyErr, pl.Identity, pl.Fingerprint)
	}
}

// TestOwnersComputedOncePerSource: a plan computes one owner per owner
// source (sameOwner), for the request's route and the tombstone rules
// together; a route with another source gets its own.
func TestOwnersComputedOncePerSource(t *testing.T) {
	user := &Route{Owner: identity.OwnerSource{Kind: identity.OwnerHeader, Header: "X-User"}}
	alsoUser := &Route{Owner: identity.OwnerSource{Kind: identity.OwnerHeader, Header: "X-User"}}
	tenant := &Route{Owner: identity.OwnerSource{Kind: identity.OwnerHeader, Header: "X-Tenant"}}
	r := httptest.NewRequest("DELETE", "http://x/v1/orders/7", nil)
	r.Header.Set("X-User", "alice")
	var o owners
	for i, c := range []struct {
		route *Route
		owner string
		n     int
	}{
		{user, identity.HeaderOwner("alice"), 1},
		{alsoUser, identity.HeaderOwner("alice"), 1},
		{tenant, "", 2},
		{user, identity.HeaderOwner("alice"), 2},
	} {
		owner, err := o.of(c.route, r)
		if owner != c.owner || o.n != c.n || (c.owner == "") != (err != nil) {
			t.Fatalf("call %d: owner %q %v after %d computations, want %q after %d", i+1, owner, err, o.n, c.owner, c.n)
		}
	}
}

// TestSameOwner: routes share an owner computation exactly when their
// sources are alike and, for jwt, bound to one verifier.
func TestSameOwner(t *testing.T) {
	hdr := func(name string) identity.OwnerSource {
		return identity.OwnerSource{Kind: identity.OwnerHeader, Header: name}
	}
	list := func(parts ...identity.OwnerSource) identity.OwnerSource {
		return identity.OwnerSource{Kind: identity.OwnerList, Parts: parts}
	}
	v1, v2 := &identity.JWTVerifier{}, &identity.JWTVerifier{}
	cases := []struct {
		name string
		a, b Route
		same bool
	}{
		{"one header", Route{Owner: hdr("X-User")}, Route{Owner: hdr("X-User")}, true},
		{"two headers", Route{Owner: hdr("X-User")}, Route{Owner: hdr("X-Tenant")}, false},
		{"header and authorization", Route{Owner: hdr("Authorization")}, Route{Owner: identity.OwnerSource{Kind: identity.OwnerAuthorization}}, false},
		{"lists", Route{Owner: list(identity.OwnerSource{Kind: identity.OwnerAuthorization}, hdr("X-A"))}, Route{Owner: list(identity.OwnerSource{Kind: identity.OwnerAuthorization}, hdr("X-A"))}, true},
		{"lists in another order", Route{Owner: list(identity.OwnerSource{Kind: identity.OwnerAuthorization}, hdr("X-A"))}, Route{Owner: list(hdr("X-A"), identity.OwnerSource{Kind: identity.OwnerAuthorization})}, false},
		{"one verifier", Route{Owner: identity.OwnerSource{Kind: identity.OwnerJWT}, jwt: v1}, Route{Owner: identity.OwnerSource{Kind: identity.OwnerJWT}, jwt: v1}, true},
		{"two verifiers", Route{Owner: identity.OwnerSource{Kind: identity.OwnerJWT}, jwt: v1}, Route{Owner: identity.OwnerSource{Kind: identity.OwnerJWT}, jwt: v2}, false},
		{"unbound", Route{Owner: identity.OwnerSource{Kind: identity.OwnerJWT}}, Route{Owner: identity.OwnerSource{Kind: identity.OwnerJWT}}, false},
		{"unknown kind", Route{Owner: identity.OwnerSource{Kind: "x"}}, Route{Owner: identity.OwnerSource{Kind: "x"}}, false},
	}
	for _, c := range cases {
		if got := sameOwner(&c.a, &c.b); got != c.same {
			t.Errorf("%s: sameOwner = %v, want %v", c.name, got, c.same)
		}
	}
}

// TestBindSharesVerifiers: routes whose jwt settings and key set are the
// same get one verifier, so an owner computed for one serves the others
// (sameOwner); routes that verify otherwise (another claim) get their own.
func TestBindSharesVerifiers(t *testing.T) {
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, jwttest.JWKSOf(t, jwttest.NewECKey(t, "k1")), 0o600); err != nil {
		t.Fatal(err)
	}
	d := DefaultRoute()
	d.Owner = identity.OwnerSource{Kind: identity.OwnerJWT}
	d.JWT = &identity.JWTSettings{JWKSFile: file, Issuers: []string{"https://issuer.test"}, Claims: identity.DefaultJWTClaims()}
	same := d
	same.Name, same.Match = "same", "POST /v1/a"
	same.JWT = &identity.JWTSettings{JWKSFile: file, Issuers: []string{"https://issuer.test"}, Claims: identity.DefaultJWTClaims()}
	other := d
	other.Name, other.Match, other.Scope = "other", "POST /v1/b", "other"
	other.JWT = &identity.JWTSettings{JWKSFile: file, Issuers: []string{"https://issuer.test"}, Claims: []string{"sub"}}
	p, err := New(d, []Route{same, other})
	if err != nil {
		t.Fatal(err)
	}
	ring, err := identity.NewKeyRing(identity.JWKSOptions{Client: &http.Client{Timeout: 5 * time.Second}, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := ring.Bind(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	byName := map[string]*Route{}
	for _, r := range append(p.routes, p.defaults) {
		byName[r.Name] = r
	}
	def, a, b := byName[p.defaults.Name], byName["same"], byName["other"]
	if def.jwt == nil || a.jwt != def.jwt || !sameOwner(def, a) {
		t.Fatalf("routes with the same jwt settings: verifiers %p and %p, want one", def.jwt, a.jwt)
	}
	if b.jwt == nil || b.jwt == def.jwt || sameOwner(def, b) {
		t.Fatalf("a route with other claims shares the defaults' verifier")
	}
}
