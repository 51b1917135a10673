package policy

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/jwttest"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/store"
)

// TestPlanAsksOnce: Ask and Identify give what Decide, TombstonesFor,
// KeyOf, OwnerOf and identity.Scoping.Identity give for the same request; the
// owner computed for the tombstone rules serves the request's own while
// its field is unchanged, and is computed again once the field is gone (the
// proxy removed it as hop-by-hop: TestAttackOwnerFieldNamedByConnectionIsNoOwner).
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
	if pl.nOwners != 1 {
		t.Fatalf("%d owners computed for the tombstone rules, want 1", pl.nOwners)
	}
	pl.Identify(nil)
	wantID := store.Identity{Owner: identity.HeaderOwner("alice"), Scope: DefaultScope + "@shop.example", Key: "k1"}
	if pl.KeyErr != nil || pl.OwnerErr != nil || pl.Identity != wantID || pl.Recipe != pl.Route.Recipe() {
		t.Fatalf("identify = %v %v %+v %q, want %+v", pl.KeyErr, pl.OwnerErr, pl.Identity, pl.Recipe, wantID)
	}
	if pl.nOwners != 1 {
		t.Fatalf("%d owners computed, want the tombstone rules' one reused", pl.nOwners)
	}

	// The field is removed between the steps: the owner is computed again.
	pl = p.Ask(r, s)
	r.Header.Del("X-User")
	pl.Identify(nil)
	if !errors.Is(pl.OwnerErr, identity.ErrOwnerMissing) {
		t.Fatalf("owner after its field was removed: %q %v, want identity.ErrOwnerMissing", pl.Owner, pl.OwnerErr)
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
