package identity

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/jwttest"
)

// testPolicy stands in for a compiled policy (package policy's *Policy)
// whose defaults route, its only route, uses owner: jwt: what a KeyRing
// binds and what verifies a request's token.
type testPolicy struct{ defaults *testRoute }

type testRoute struct {
	Name  string
	Owner OwnerSource
	JWT   *JWTSettings
	jwt   *JWTVerifier
}

func newTestPolicy(s JWTSettings) *testPolicy {
	return &testPolicy{defaults: &testRoute{Name: "default", Owner: OwnerSource{Kind: OwnerJWT}, JWT: &s}}
}

func (p *testPolicy) Defaults() *testRoute { return p.defaults }

func (p *testPolicy) JWTRoutes() []JWTRoute {
	r := p.defaults
	return []JWTRoute{{
		Name: r.Name, Defaults: true, Owner: r.Owner, JWT: r.JWT,
		Field: func(suffix string, err error) error { return fmt.Errorf("defaults%s: %w", suffix, err) },
		Use:   func(v *JWTVerifier) { r.jwt = v },
	}}
}

// OwnerOf is policy.Route.OwnerOf: the owner its bound verifier derives.
func (r *testRoute) OwnerOf(req *http.Request) (string, error) { return r.Owner.Of(req, r.jwt) }

// jwtPolicy returns a policy whose defaults route uses owner: jwt with s,
// bound with a KeyRing on clock.
func jwtPolicy(t testing.TB, s JWTSettings, clock *jwttest.Clock) (*testPolicy, *KeyRing) {
	t.Helper()
	p := newTestPolicy(s)
	ring, err := NewKeyRing(JWKSOptions{Client: &http.Client{Timeout: 5 * time.Second}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := ring.Bind(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	return p, ring
}
