package policy

import (
	"strings"
	"testing"

	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/store"
)

// TestOwnerRecordsPerScopeAndForm: routes of one scope and owner form
// share one owner record; another scope has its own; a form one source
// alone produces (authorization) needs none. The record's identity is
// one no request has, and its fingerprint and recipe fit every store.
func TestOwnerRecordsPerScopeAndForm(t *testing.T) {
	user := identity.OwnerSource{Kind: identity.OwnerHeader, Header: "X-User"}
	d := DefaultRoute()
	d.Owner = user
	route := func(name, match, scope string, owner identity.OwnerSource) Route {
		r := d
		r.Name, r.Match, r.Scope, r.Owner = name, match, scope, owner
		return r
	}
	p, err := New(d, []Route{
		route("a", "POST /a", "s", user),
		route("b", "POST /b", "s", user),
		route("c", "POST /c", "t", user),
		route("d", "POST /d", "s", identity.OwnerSource{Kind: identity.OwnerAuthorization}),
	})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*Route{}
	for _, r := range p.Routes() {
		byName[r.Name] = r
	}
	a, b, c := byName["a"].OwnerRecord(), byName["b"].OwnerRecord(), byName["c"].OwnerRecord()
	if a == nil || a != b {
		t.Fatalf("routes a and b (one scope, header:X-User) have owner records %p and %p, want one shared", a, b)
	}
	if c == nil || c == a || c.Identity.Scope != "t" || c.Fingerprint != a.Fingerprint {
		t.Fatalf("route c (scope t) has owner record %+v, want its own with the same source's fingerprint", c)
	}
	if r := byName["d"].OwnerRecord(); r != nil {
		t.Fatalf("an authorization route has owner record %+v, want none", r)
	}
	want := store.Identity{Owner: OwnerRecordOwner, Scope: "s", Key: "header"}
	if a.Identity != want || a.Source != "header:X-User" || RecordedSource(a.Recipe) != "header:X-User" {
		t.Fatalf("owner record %+v, want identity %+v naming header:X-User", a, want)
	}
	for _, prefix := range []string{"h:", "sha256:", "cert:", "certder:", "j:", "m:"} {
		if strings.HasPrefix(OwnerRecordOwner, prefix) || OwnerRecordOwner == "" {
			t.Fatalf("OwnerRecordOwner %q is of the stored form of an owner kind (%q)", OwnerRecordOwner, prefix)
		}
	}
	if err := (store.ClaimParams{Identity: a.Identity, Fingerprint: a.Fingerprint, Recipe: a.Recipe, Token: "t", Lease: 1e9}).Validate(); err != nil {
		t.Fatalf("the owner record's claim is one stores refuse: %v", err)
	}
}
