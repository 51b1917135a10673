package policy

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/idemgate/idemgate/internal/jwttest"
	"github.com/idemgate/idemgate/policy/identity"
)

// TestOwnerLedgerAdmitsAnotherNumberOfJWTClaims: a route whose owner is
// the token's sub alone, for one issuer, is moved to [iss, sub] to accept
// a second issuer, the safe way (docs/owners.md). Its old owners,
// j:["alice"], can never equal a new one, j:["https://a.test","alice"]
// (another number of values), so the reload is harmless and admitted;
// [sub] to [email] (one value each: alice's sub may be bob's email) is
// still refused.
func TestOwnerLedgerAdmitsAnotherNumberOfJWTClaims(t *testing.T) {
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, jwttest.JWKSOf(t, jwttest.NewECKey(t, "k1")), 0o600); err != nil {
		t.Fatal(err)
	}
	withClaims := func(issuers []string, claims ...string) *Policy {
		t.Helper()
		d := DefaultRoute()
		d.Owner = identity.OwnerSource{Kind: identity.OwnerJWT}
		d.JWT = &identity.JWTSettings{JWKSFile: file, Issuers: issuers, Claims: claims}
		p, err := New(d, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	var l OwnerLedger
	if err := l.Admit(withClaims([]string{"https://a.test"}, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := l.Admit(withClaims([]string{"https://a.test", "https://b.test"}, "iss", "sub")); err != nil {
		t.Fatalf("[sub] to [iss, sub]: %v, want admitted", err)
	}
	if err := l.Admit(withClaims([]string{"https://a.test"}, "email")); err == nil {
		t.Fatal("[sub] to [email] admitted, want refused")
	}
}

// TestOwnerLedgerAdmitsAnOwnerListOfAnotherForm: an owner list given one
// more source (a tenant header beside the API key) stores "m:" and an
// array of three parts, which never equals one of two, so the reload is
// admitted; a list whose header part changes name is refused.
func TestOwnerLedgerAdmitsAnOwnerListOfAnotherForm(t *testing.T) {
	withOwner := func(spec ...string) *Policy {
		t.Helper()
		src, err := identity.ParseOwnerSources(spec)
		if err != nil {
			t.Fatal(err)
		}
		d := DefaultRoute()
		d.Owner = src
		p, err := New(d, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	var l OwnerLedger
	if err := l.Admit(withOwner("authorization", "header:X-Account")); err != nil {
		t.Fatal(err)
	}
	if err := l.Admit(withOwner("authorization", "header:X-Account", "header:X-Tenant")); err != nil {
		t.Fatalf("one more source in the list: %v, want admitted", err)
	}
	if err := l.Admit(withOwner("authorization", "header:X-Partner")); err == nil {
		t.Fatal("[authorization, header:X-Account] to [authorization, header:X-Partner] admitted, want refused")
	}
}
