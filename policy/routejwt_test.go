package policy

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/jwttest"
	"github.com/idemgate/idemgate/policy/identity"
)

func TestKeyRingBindErrors(t *testing.T) {
	dir := t.TempDir()
	sym := filepath.Join(dir, "symmetric.json")
	if err := os.WriteFile(sym, []byte(`{"keys":[{"kty":"oct","kid":"h","k":"c2VjcmV0LXNlY3JldC1zZWNyZXQ"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.json")
	d := DefaultRoute()
	d.Owner = identity.OwnerSource{Kind: identity.OwnerJWT}
	d.JWT = &identity.JWTSettings{JWKSFile: missing, Issuers: []string{jwttest.Issuer}, Claims: identity.DefaultJWTClaims()}
	r0 := testRoute("orders", "/v1/orders")
	r0.Owner, r0.JWT = d.Owner, d.JWT // same file as defaults: reported once
	r1 := testRoute("pay", "/v1/pay")
	r1.Owner = d.Owner
	r1.JWT = &identity.JWTSettings{JWKSFile: sym, Issuers: []string{jwttest.Issuer}, Claims: identity.DefaultJWTClaims()}
	p, err := New(d, []Route{r0, r1})
	if err != nil {
		t.Fatal(err)
	}
	ring, err := identity.NewKeyRing(identity.JWKSOptions{Client: &http.Client{}, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	err = ring.Bind(t.Context(), p)
	var paths []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *FieldError
		if errors.As(e, &fe) {
			paths = append(paths, fe.Path)
		}
	}
	if strings.Join(paths, " ") != "defaults.jwt.jwks_file routes[1].jwt.jwks_file" {
		t.Fatalf("Bind errors at %v: %v", paths, err)
	}
	if !strings.Contains(err.Error(), "no usable signing key") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Bind error does not say why: %v", err)
	}
	if _, err := identity.NewKeyRing(identity.JWKSOptions{Now: time.Now}); err == nil {
		t.Error("identity.NewKeyRing without a Client")
	}
}

func TestJWTSettingsValidation(t *testing.T) {
	ok := identity.JWTSettings{JWKSURL: "https://issuer.test/jwks.json", Issuers: []string{jwttest.Issuer}, Claims: identity.DefaultJWTClaims()}
	tests := []struct {
		name  string
		owner identity.OwnerKind
		edit  func(*identity.JWTSettings) *identity.JWTSettings
		path  string
	}{
		{"missing section", identity.OwnerJWT, func(*identity.JWTSettings) *identity.JWTSettings { return nil }, "defaults.jwt"},
		{"both sources", identity.OwnerJWT, func(s *identity.JWTSettings) *identity.JWTSettings { s.JWKSFile = "/x"; return s }, "defaults.jwt"},
		{"no source", identity.OwnerJWT, func(s *identity.JWTSettings) *identity.JWTSettings { s.JWKSURL = ""; return s }, "defaults.jwt"},
		{"relative url", identity.OwnerJWT, func(s *identity.JWTSettings) *identity.JWTSettings { s.JWKSURL = "/jwks.json"; return s }, "defaults.jwt.jwks_url"},
		{"ftp url", identity.OwnerJWT, func(s *identity.JWTSettings) *identity.JWTSettings { s.JWKSURL = "ftp://issuer.test/jwks"; return s }, "defaults.jwt.jwks_url"},
		{"no host", identity.OwnerJWT, func(s *identity.JWTSettings) *identity.JWTSettings { s.JWKSURL = "https:///jwks"; return s }, "defaults.jwt.jwks_url"},
		{"no issuers", identity.OwnerJWT, func(s *identity.JWTSettings) *identity.JWTSettings { s.Issuers = nil; return s }, "defaults.jwt.issuers"},
		{"empty issuer", identity.OwnerJWT, func(s *identity.JWTSettings) *identity.JWTSettings { s.Issuers = []string{" "}; return s }, "defaults.jwt.issuers"},
		{"empty audience", identity.OwnerJWT, func(s *identity.JWTSettings) *identity.JWTSettings { s.Audiences = []string{""}; return s }, "defaults.jwt.audiences"},
		{"no claims", identity.OwnerJWT, func(s *identity.JWTSettings) *identity.JWTSettings { s.Claims = []string{}; return s }, "defaults.jwt.claims"},
		{"duplicate claim", identity.OwnerJWT, func(s *identity.JWTSettings) *identity.JWTSettings { s.Claims = []string{"sub", "sub"}; return s }, "defaults.jwt.claims"},
		{"jwt without owner jwt", identity.OwnerAuthorization, func(s *identity.JWTSettings) *identity.JWTSettings { return s }, "defaults.jwt"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := DefaultRoute()
			d.Owner = identity.OwnerSource{Kind: tc.owner}
			s := ok
			d.JWT = tc.edit(&s)
			_, err := New(d, nil)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Path != tc.path {
				t.Fatalf("New = %v; want an error at %s", err, tc.path)
			}
		})
	}
	d := DefaultRoute()
	d.Owner = identity.OwnerSource{Kind: identity.OwnerJWT}
	d.JWT = &ok
	p, err := New(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := p.Describe(&buf); err != nil {
		t.Fatal(err)
	}
	want := `  jwt: {jwks_url: "https://issuer.test/jwks.json", issuers: ["https://issuer.test"], audiences: [], claims: ["iss", "sub"]} # exp/nbf checked with 30s leeway`
	if !strings.Contains(buf.String(), want) || !strings.Contains(buf.String(), `owner: "jwt"`) {
		t.Errorf("Describe lacks %q:\n%s", want, buf.String())
	}
	if o, err := identity.ParseOwnerSource("jwt"); err != nil || o.Kind != identity.OwnerJWT || o.String() != "jwt" {
		t.Errorf("identity.ParseOwnerSource(jwt) = %v, %v", o, err)
	}
}
