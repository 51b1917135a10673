package policy

import (
	"strings"
	"testing"

	"github.com/idemgate/idemgate/policy/identity"
)

// TestScopesKeepHostsAndOwnerSourcesApart pins the rules that make a shared
// scope safe (found by adversarial testing; TestHostRoutesNeverShareRecords
// in proxy): the fingerprint does not
// cover the host, and owner sources of one kind produce values of one form,
// so routes of different hosts, or with different sources of one owner kind,
// must not keep their records in one scope.
func TestScopesKeepHostsAndOwnerSourcesApart(t *testing.T) {
	header := func(name, match, owner string) Route {
		r := sharedScopeRoute(name, match)
		o, err := identity.ParseOwnerSource(owner)
		if err != nil {
			t.Fatal(err)
		}
		r.Owner = o
		return r
	}
	p := mustNew(t, sharedScopeRoute("a", "POST a.example/v1/orders"), sharedScopeRoute("b", "POST B.Example/v1/orders"),
		sharedScopeRoute("c", "POST /v1/orders"), sharedScopeRoute("a2", "POST a.example/v1/payments"))
	for name, want := range map[string]string{"a": "a.example", "b": "b.example", "c": DefaultScope, "a2": "a.example", "default": DefaultScope} {
		for _, r := range p.Routes() {
			if r.Name == name && r.Scope != want {
				t.Errorf("route %s scope = %q, want %q (host patterns get their host as scope)", name, r.Scope, want)
			}
		}
	}
	// Different kinds never collide: authorization (defaults) beside header.
	mustNew(t, header("h", "POST /v1/h", "header:X-User"))

	for _, tc := range []struct {
		name   string
		routes []Route
		want   string
	}{
		{"two hosts in one explicit scope", func() []Route {
			a, b := sharedScopeRoute("a", "POST a.example/v1/orders"), sharedScopeRoute("b", "POST b.example/v1/orders")
			a.Scope, b.Scope = "shop", "shop"
			return []Route{a, b}
		}(), `routes[1].scope: route "b" matches host b.example but keeps its records in scope "shop" with routes[0] (a), which matches host a.example`},
		{"a host route in the defaults' scope", func() []Route {
			a := sharedScopeRoute("a", "POST a.example/v1/orders")
			a.Scope = DefaultScope
			return []Route{a}
		}(), `routes[0].scope: route "a" matches host a.example but keeps its records in scope "default" with defaults`},
		{"two owner headers", []Route{header("u", "POST /v1/u", "header:X-User"), header("p", "POST /v1/p", "header:X-Partner")},
			`routes[1].owner: route "p" takes owners from header:X-Partner but shares scope "default" with routes[0], which takes them from header:X-User`},
		{"jwt owners without iss across issuers", func() []Route {
			a, b := sharedScopeRoute("a", "POST /v1/a"), sharedScopeRoute("b", "POST /v1/b")
			a.Owner, b.Owner = identity.OwnerSource{Kind: identity.OwnerJWT}, identity.OwnerSource{Kind: identity.OwnerJWT}
			a.JWT = &identity.JWTSettings{JWKSFile: "/x", Issuers: []string{"https://one"}, Claims: []string{"sub"}}
			b.JWT = &identity.JWTSettings{JWKSFile: "/x", Issuers: []string{"https://two"}, Claims: []string{"sub"}}
			return []Route{a, b}
		}(), `routes[1].owner: route "b" takes owners from jwt claims sub of issuers https://two`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(DefaultRoute(), tc.routes)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// The same jwt claims with iss may span issuers: iss is in the owner.
	a, b := sharedScopeRoute("a", "POST /v1/a"), sharedScopeRoute("b", "POST /v1/b")
	a.Owner, b.Owner = identity.OwnerSource{Kind: identity.OwnerJWT}, identity.OwnerSource{Kind: identity.OwnerJWT}
	a.JWT = &identity.JWTSettings{JWKSFile: "/x", Issuers: []string{"https://one"}, Claims: []string{"iss", "sub"}}
	b.JWT = &identity.JWTSettings{JWKSFile: "/x", Issuers: []string{"https://two"}, Claims: []string{"iss", "sub"}}
	mustNew(t, a, b)
}
