// Package testcerts generates throwaway CAs and certificates for tests
// (crypto/x509, ECDSA P-256), so that no key is ever committed.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a generated certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is the CA certificate in PEM form.
	PEM []byte
}

// NewCA returns a fresh CA named name; it fails t on error.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Leaf is a generated certificate signed by a CA.
type Leaf struct {
	// DER is the certificate; CertPEM and KeyPEM its PEM forms.
	DER             []byte
	CertPEM, KeyPEM []byte
}

// TLS returns the leaf as a tls.Certificate.
func (l *Leaf) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(l.CertPEM, l.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Options shape a leaf.
type Options struct {
	// CommonName of the subject.
	CommonName string
	// Server makes a server certificate for 127.0.0.1 and localhost;
	// otherwise a client certificate.
	Server bool
	// Expired makes a certificate whose validity ended an hour ago.
	Expired bool
	// DNSNames, when set, are a server certificate's only names (no
	// 127.0.0.1), so a client must verify one of them explicitly.
	DNSNames []string
	// Organization and OrganizationalUnit join CommonName in the subject.
	Organization, OrganizationalUnit []string
	// UPN, when set, is the certificate's one subject alternative name: an
	// otherName holding a Microsoft user principal name (OID
	// 1.3.6.1.4.1.311.20.2.3), as Active Directory Certificate Services and
	// smart cards issue it. The standard library does not decode otherName.
	UPN string
}

// UPNAltName returns a subjectAltName extension (RFC 5280 section 4.2.1.6)
// whose one GeneralName is an otherName holding upn as a Microsoft user
// principal name (a UTF8String under OID 1.3.6.1.4.1.311.20.2.3).
func UPNAltName(upn string) (pkix.Extension, error) {
	value, err := asn1.MarshalWithParams(upn, "utf8")
	if err != nil {
		return pkix.Extension{}, err
	}
	other := struct {
		TypeID asn1.ObjectIdentifier
		Value  asn1.RawValue `asn1:"tag:0,explicit"`
	}{asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 311, 20, 2, 3}, asn1.RawValue{FullBytes: value}}
	on, err := asn1.MarshalWithParams(other, "tag:0")
	if err != nil {
		return pkix.Extension{}, err
	}
	names, err := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSequence, IsCompound: true, Bytes: on})
	if err != nil {
		return pkix.Extension{}, err
	}
	return pkix.Extension{Id: asn1.ObjectIdentifier{2, 5, 29, 17}, Value: names}, nil
}

// Issue signs a leaf with ca.
func (ca *CA) Issue(t testing.TB, o Options) *Leaf {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: o.CommonName, Organization: o.Organization, OrganizationalUnit: o.OrganizationalUnit},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if o.Server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
		if len(o.DNSNames) > 0 {
			tmpl.IPAddresses, tmpl.DNSNames = nil, o.DNSNames
		}
	}
	if o.UPN != "" {
		ext, err := UPNAltName(o.UPN)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.ExtraExtensions = append(tmpl.ExtraExtensions, ext)
	}
	if o.Expired {
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &Leaf{
		DER:     der,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}),
	}
}

// Write writes data to dir/name (mode 0600) and returns the path.
func Write(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Listener is what a TLS listener of idemgate's needs in a test: a
// server certificate for 127.0.0.1 issued by a server CA of its own, and a
// client CA file, written into a directory, and the pool clients verify
// the server with.
type Listener struct {
	// ServerCA issued Server; a test may issue the next server
	// certificate with it.
	ServerCA *CA
	Server   *Leaf
	// CertFile and KeyFile hold Server (tls.crt, tls.key); CAFile holds
	// the client CA (clients.crt).
	CertFile, KeyFile, CAFile string
	// Roots holds ServerCA, for clients.
	Roots *x509.CertPool
}

// NewListener issues a server certificate from a new server CA and writes
// it and clientCA's certificate into dir.
func NewListener(t testing.TB, dir string, clientCA *CA) *Listener {
	t.Helper()
	l := &Listener{ServerCA: NewCA(t, "server CA"), Roots: x509.NewCertPool()}
	l.Server = l.ServerCA.Issue(t, Options{CommonName: "idemgate", Server: true})
	l.CertFile = Write(t, dir, "tls.crt", l.Server.CertPEM)
	l.KeyFile = Write(t, dir, "tls.key", l.Server.KeyPEM)
	l.CAFile = Write(t, dir, "clients.crt", clientCA.PEM)
	l.Roots.AddCert(l.ServerCA.Cert)
	return l
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
