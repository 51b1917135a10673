package policy

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http/httptest"
	"testing"

	"github.com/idemgate/idemgate/internal/testcerts"
	"github.com/idemgate/idemgate/policy/identity"
)

// TestOwnerFromValueMatchesOwnerOf: for every owner kind the admin API's
// owner_value derives the owner a request with that value gets.
func TestOwnerFromValueMatchesOwnerOf(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	leaf := ca.Issue(t, testcerts.Options{CommonName: "alice"})
	cert, _ := x509.ParseCertificate(leaf.DER)
	req := httptest.NewRequest("POST", "/", nil)
	req.Header.Set("X-User", " carol ")
	req.Header.Set("Authorization", "Bearer abc")
	req.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}
	for _, c := range []struct {
		owner identity.OwnerSource
		value string
	}{
		{identity.OwnerSource{Kind: identity.OwnerHeader, Header: "X-User"}, "carol"},
		{identity.OwnerSource{Kind: identity.OwnerAuthorization}, "Bearer abc"},
		{identity.OwnerSource{Kind: identity.OwnerClientCert}, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.DER}))},
		{identity.OwnerSource{Kind: identity.OwnerNone}, ""},
	} {
		r := &Route{Name: "r", Owner: c.owner}
		want, err := r.OwnerOf(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.OwnerFromValue(c.value)
		if err != nil || got != want {
			t.Errorf("%s: OwnerFromValue = %q, %v; OwnerOf = %q", c.owner, got, err, want)
		}
		if !r.HasStoredOwnerForm(got) {
			t.Errorf("%s: %q not of its own form", c.owner, got)
		}
	}
	r := &Route{Name: "r", Owner: identity.OwnerSource{Kind: identity.OwnerJWT}, JWT: &identity.JWTSettings{Claims: []string{"iss", "sub"}}}
	want, _ := identity.JWTOwner([]any{"https://issuer.example", json.Number("42")})
	if got, err := r.OwnerFromValue(`["https://issuer.example", 42]`); err != nil || got != want {
		t.Errorf("jwt: %q %v, want %q", got, err, want)
	}
	if _, err := r.OwnerFromValue(`["only-one"]`); err == nil {
		t.Error("jwt with too few values accepted")
	}
	if _, err := (&Route{Owner: identity.OwnerSource{Kind: identity.OwnerClientCert}}).OwnerFromValue("abc"); err == nil {
		t.Error("client-cert without PEM accepted")
	}
	if (&Route{Owner: identity.OwnerSource{Kind: identity.OwnerHeader, Header: "X-User"}}).HasStoredOwnerForm("carol") {
		t.Error("carol is of the h: form")
	}
}
