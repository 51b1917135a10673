package policy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"math/big"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy/identity"
)

func selfSignedCert(t *testing.T) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "client-a"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestOwnerOf(t *testing.T) {
	cert := selfSignedCert(t)
	authSum := sha256.Sum256([]byte("Bearer s3cret"))

	route := func(src string) *Route {
		o, err := identity.ParseOwnerSource(src)
		if err != nil {
			t.Fatalf("identity.ParseOwnerSource(%q): %v", src, err)
		}
		return &Route{Name: "r", Owner: o, AllowGlobalKeys: src == "none"}
	}
	tests := []struct {
		name    string
		source  string
		setup   func(h map[string][]string) // header
		tls     *tls.ConnectionState
		want    string
		missing bool
	}{
		{name: "header", source: "header:X-User", setup: func(h map[string][]string) { h["X-User"] = []string{"  alice "} }, want: "h:alice"},
		{name: "header lowercase name in config", source: "header:x-user", setup: func(h map[string][]string) { h["X-User"] = []string{"bob"} }, want: "h:bob"},
		{name: "header that looks like a hash", source: "header:X-User", setup: func(h map[string][]string) { h["X-User"] = []string{"sha256:" + hex.EncodeToString(authSum[:])} }, want: "h:sha256:" + hex.EncodeToString(authSum[:])},
		{name: "header absent", source: "header:X-User", missing: true},
		{name: "header empty", source: "header:X-User", setup: func(h map[string][]string) { h["X-User"] = []string{" "} }, missing: true},
		{name: "header twice", source: "header:X-User", setup: func(h map[string][]string) { h["X-User"] = []string{"a", "b"} }, missing: true},
		{name: "authorization", source: "authorization", setup: func(h map[string][]string) { h["Authorization"] = []string{"Bearer s3cret"} }, want: "sha256:" + hex.EncodeToString(authSum[:])},
		{name: "authorization absent", source: "authorization", missing: true},
		{name: "authorization twice", source: "authorization", setup: func(h map[string][]string) { h["Authorization"] = []string{"a", "b"} }, missing: true},
		{name: "client cert verified", source: "client-cert", tls: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}, VerifiedChains: [][]*x509.Certificate{{cert}}}, want: identity.CertOwner(cert)},
		{name: "client cert unverified", source: "client-cert", tls: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}, missing: true},
		{name: "client cert plain http", source: "client-cert", missing: true},
		{name: "none", source: "none", setup: func(h map[string][]string) { h["Authorization"] = []string{"x"} }, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", "/x", nil)
			if tt.setup != nil {
				tt.setup(req.Header)
			}
			req.TLS = tt.tls
			got, err := route(tt.source).OwnerOf(req)
			if tt.missing {
				if !errors.Is(err, identity.ErrOwnerMissing) || got != "" {
					t.Fatalf("OwnerOf = %q, %v; want identity.ErrOwnerMissing", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("OwnerOf = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if got := identity.AuthorizationOwner("Bearer s3cret"); got != "sha256:"+hex.EncodeToString(authSum[:]) {
		t.Errorf("identity.AuthorizationOwner = %q", got)
	}
	if strings.Contains(identity.AuthorizationOwner("Bearer s3cret"), "s3cret") {
		t.Error("the raw credential leaks into the owner")
	}
}

func TestParseOwnerSource(t *testing.T) {
	good := map[string]identity.OwnerSource{
		"authorization":        {Kind: identity.OwnerAuthorization},
		"client-cert":          {Kind: identity.OwnerClientCert},
		"none":                 {Kind: identity.OwnerNone},
		"header:x-tenant-user": {Kind: identity.OwnerHeader, Header: "X-Tenant-User"},
	}
	for in, want := range good {
		got, err := identity.ParseOwnerSource(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("identity.ParseOwnerSource(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "header:", "header:bad name", "cookie", "Authorization", "header:Authorization", "header:cookie", "anonymous"} {
		if got, err := identity.ParseOwnerSource(in); err == nil {
			t.Errorf("identity.ParseOwnerSource(%q) = %+v; want an error", in, got)
		}
	}
}
