package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/hex"
	"math/big"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testcerts"
)

// TestCertOwnerSurvivesRenewal is adversarial finding F2 of the second
// round: a renewed client certificate (same names, same CA, new key and
// serial) was a new owner, so a retry across a renewal ran again. The owner
// now comes from the names the CA vouches for.
func TestCertOwnerSurvivesRenewal(t *testing.T) {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, subject pkix.Name, uris ...string) *x509.Certificate {
		t.Helper()
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: subject, NotBefore: time.Now().Add(-time.Hour),
			NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		for _, u := range uris {
			pu, _ := url.Parse(u)
			tmpl.URIs = append(tmpl.URIs, pu)
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(der)
		return c
	}
	alice := pkix.Name{CommonName: "alice", Organization: []string{"acme"}}
	first, renewed := issue(10, alice), issue(11, alice)
	if CertOwner(first) != CertOwner(renewed) {
		t.Fatalf("a renewed certificate is another owner: %s vs %s", CertOwner(first), CertOwner(renewed))
	}
	if !strings.HasPrefix(CertOwner(first), "cert:") {
		t.Fatalf("owner %q lacks the cert: prefix", CertOwner(first))
	}
	if CertOwner(issue(12, pkix.Name{CommonName: "bob", Organization: []string{"acme"}})) == CertOwner(first) {
		t.Fatal("another subject is the same owner")
	}
	// SPIFFE-style certificates: an empty subject, the identity in a URI SAN.
	a, b := issue(13, pkix.Name{}, "spiffe://acme/ns/a"), issue(14, pkix.Name{}, "spiffe://acme/ns/b")
	if CertOwner(a) == CertOwner(b) {
		t.Fatal("two URI identities with empty subjects are one owner")
	}
	if CertOwner(a) != CertOwner(issue(15, pkix.Name{}, "spiffe://acme/ns/a")) {
		t.Fatal("a renewed SPIFFE certificate is another owner")
	}
	// No names at all: nobody to keep across renewals, so the DER.
	n1, n2 := issue(16, pkix.Name{}), issue(17, pkix.Name{})
	if !strings.HasPrefix(CertOwner(n1), "certder:") || CertOwner(n1) == CertOwner(n2) {
		t.Fatalf("nameless certificates: %s, %s, want distinct certder: owners", CertOwner(n1), CertOwner(n2))
	}
}

// TestCertOwnerCountsEveryAltName: two certificates of one CA with one
// subject that differ only in an otherName alternative name (a UPN, which
// the standard library does not decode) were one owner, so bob was handed
// alice's stored response. Every name the CA wrote now counts; a renewal
// stays one owner and a certificate with only decoded names keeps the
// owner earlier builds gave it (records stored under it stay reachable).
func TestCertOwnerCountsEveryAltName(t *testing.T) {
	ca := testcerts.NewCA(t, "corp CA")
	staff := testcerts.Options{Organization: []string{"Example Corp"}, OrganizationalUnit: []string{"Staff"}}
	leaf := func(o testcerts.Options) *x509.Certificate {
		t.Helper()
		c, err := x509.ParseCertificate(ca.Issue(t, o).DER)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	withUPN := func(upn string) testcerts.Options { o := staff; o.UPN = upn; return o }
	alice, bob := leaf(withUPN("alice@corp.example")), leaf(withUPN("bob@corp.example"))
	if CertOwner(alice) == CertOwner(bob) {
		t.Fatalf("certificates that differ only in their UPN are one owner %s", CertOwner(alice))
	}
	if CertOwner(alice) != CertOwner(leaf(withUPN("alice@corp.example"))) {
		t.Fatal("a renewed certificate (new key and serial, same names) is another owner")
	}
	if !strings.HasPrefix(CertOwner(alice), "cert:") {
		t.Fatalf("owner %q lacks the cert: prefix", CertOwner(alice))
	}
	cn := func(name string) testcerts.Options { o := staff; o.CommonName = name; return o }
	if CertOwner(leaf(cn("alice"))) == CertOwner(leaf(cn("bob"))) {
		t.Fatal("certificates that differ only in CN are one owner")
	}

	// A certificate with only decoded names keeps the owner of the formula
	// before: issuer, subject and the sorted decoded names, length-prefixed.
	c := leaf(cn("carol"))
	h := sha256.New()
	for _, part := range []string{string(c.RawIssuer), string(c.RawSubject)} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write([]byte(part))
	}
	if want := "cert:" + hex.EncodeToString(h.Sum(nil)); CertOwner(c) != want {
		t.Fatalf("owner of a certificate without undecoded names changed: %s, want %s", CertOwner(c), want)
	}
}
