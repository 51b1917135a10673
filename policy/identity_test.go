package policy

import (
	"net/url"
	"testing"

	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/store"
)

// TestScopingIdentity pins the one derivation of a record's identity that
// the proxy, tombstones, the replay cache, the layout 1 fallback and the
// admin API share: the host joins the scope only with pass_host and only
// on routes whose pattern names no host, in one canonical form per origin
// (letter case, a trailing dot, an empty port and the scheme's default
// port do not make another scope; RFC 3986 section 6.2.3, RFC 9110
// section 4.2.3).
func TestScopingIdentity(t *testing.T) {
	shop := sharedScopeRoute("shop", "POST /v1/shop")
	shop.Scope = "shop"
	own := sharedScopeRoute("own", "POST /v1/own")
	own.Upstream = &url.URL{Scheme: "http", Host: "Billing.internal:8080"}
	p := mustNew(t,
		sharedScopeRoute("orders", "POST /v1/orders"),
		sharedScopeRoute("tenant", "POST T1.Example/v1/tenant"),
		shop, own)
	route := map[string]*Route{}
	for _, r := range p.Routes() {
		route[r.Name] = r
	}
	on, off := identity.Scoping{PassHost: true}, identity.Scoping{}
	for _, tc := range []struct {
		name    string
		s       identity.Scoping
		route   string
		host    string
		https   bool
		want    string // the scope
		hostful bool   // HostScoped
	}{
		{"pass_host off ignores the host", off, "orders", "t1.example:8080", false, "default", false},
		{"pass_host off, defaults route", off, "default", "T1.example", false, "default", false},
		{"pass_host off, explicit scope", off, "shop", "t1.example", false, "shop", false},
		{"pass_host off, own upstream", off, "own", "t1.example", false, "upstream:billing.internal:8080", false},
		{"pass_host on", on, "orders", "t1.example", false, "default@t1.example", true},
		{"letter case", on, "orders", "T1.Example", false, "default@t1.example", true},
		{"trailing dot", on, "orders", "t1.example.", false, "default@t1.example", true},
		{"http default port", on, "orders", "t1.example:80", false, "default@t1.example", true},
		{"https default port", on, "orders", "t1.example:443", true, "default@t1.example", true},
		{"all at once", on, "orders", "T1.EXAMPLE.:80", false, "default@t1.example", true},
		{"empty port", on, "orders", "t1.example:", false, "default@t1.example", true},
		{"443 over http is another origin", on, "orders", "t1.example:443", false, "default@t1.example:443", true},
		{"80 over https is another origin", on, "orders", "t1.example:80", true, "default@t1.example:80", true},
		{"another port", on, "orders", "t1.example:8080", false, "default@t1.example:8080", true},
		{"another port, case and dot", on, "orders", "T1.example.:8080", true, "default@t1.example:8080", true},
		{"IPv6 literal with default port", on, "orders", "[::1]:80", false, "default@[::1]", true},
		{"IPv6 literal without port", on, "orders", "[::1]", false, "default@[::1]", true},
		{"IPv6 literal with another port", on, "orders", "[::1]:8080", false, "default@[::1]:8080", true},
		{"IPv4 with default port", on, "orders", "127.0.0.1:443", true, "default@127.0.0.1", true},
		{"explicit scope", on, "shop", "t1.example:80", false, "shop@t1.example", true},
		{"own upstream", on, "own", "t1.example", false, "upstream:billing.internal:8080@t1.example", true},
		{"defaults route", on, "default", "t1.example", false, "default@t1.example", true},
		{"host pattern keeps its own scope", on, "tenant", "t1.example:80", false, "t1.example", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := route[tc.route]
			at := identity.Origin{Host: tc.host, HTTPS: tc.https}
			want := store.Identity{Owner: "h:alice", Scope: tc.want, Key: "k1"}
			if got := tc.s.Identity(r, "h:alice", "k1", at); got != want {
				t.Errorf("Identity = %+v, want %+v", got, want)
			}
			wantRes := store.Resource{Owner: "h:alice", Scope: tc.want, Path: "/v1/orders/1"}
			if got := tc.s.Resource(r, "h:alice", "/v1/orders/1", at); got != wantRes {
				t.Errorf("Resource = %+v, want %+v (a DELETE must reach the scope its creates wrote)", got, wantRes)
			}
			if got := tc.s.HostScoped(r); got != tc.hostful {
				t.Errorf("HostScoped = %v, want %v", got, tc.hostful)
			}
		})
	}
}

// TestLayout1Identity: the layout 1 record of an identity sits under the
// route's name, and there is none to look for when that is the identity's
// own scope.
func TestLayout1Identity(t *testing.T) {
	id := store.Identity{Owner: "h:alice", Scope: "default@t1.example", Key: "k1"}
	if old, ok := identity.Layout1(id, "orders"); !ok || old != (store.Identity{Owner: "h:alice", Scope: "orders", Key: "k1"}) {
		t.Errorf("identity.Layout1(orders) = %+v, %v", old, ok)
	}
	if _, ok := identity.Layout1(store.Identity{Owner: "h:alice", Scope: "orders", Key: "k1"}, "orders"); ok {
		t.Error("Layout1 of a scope equal to the route name: want none")
	}
}
