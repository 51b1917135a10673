package certfile

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testcerts"
)

// TestPoolKeepsPreviousUntilNewLoads: a CA file is read again when it
// changes, at the first look after CheckInterval, and on Reload; a file that
// does not load keeps the previous pool in service and is reported.
func TestPoolKeepsPreviousUntilNewLoads(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := testcerts.NewCA(t, "old"), testcerts.NewCA(t, "new")
	path := testcerts.Write(t, dir, "ca.crt", oldCA.PEM)
	var results []bool
	p, err := NewPool(path, "test.ca_file", nil, func(name string, ok bool) {
		if name != "test.ca_file" {
			t.Errorf("observer name %q", name)
		}
		results = append(results, ok)
	})
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	p.now = func() time.Time { return clock }
	first := p.Current()
	trusts := func(ca *testcerts.CA) bool {
		leaf := ca.Issue(t, testcerts.Options{CommonName: "c"})
		c := leaf.TLS(t)
		cert, err := parseLeaf(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return verifies(cert, p.Current())
	}
	if !trusts(oldCA) || trusts(newCA) {
		t.Fatal("initial pool")
	}

	// A broken write: kept, reported, tried again.
	if err := os.WriteFile(path, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(CheckInterval)
	if p.Current() != first || len(results) != 1 || results[0] {
		t.Fatalf("broken file: pool replaced or not reported (%v)", results)
	}
	// Within CheckInterval nothing is looked at.
	if err := os.WriteFile(path, append(append([]byte{}, oldCA.PEM...), newCA.PEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	if p.Current() != first {
		t.Fatal("looked at the file again within CheckInterval")
	}
	clock = clock.Add(CheckInterval)
	if p.Current() == first || !trusts(oldCA) || !trusts(newCA) || results[len(results)-1] != true {
		t.Fatalf("old+new bundle not in service (%v)", results)
	}
	// Reload reads at once, whatever the clock.
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), newCA.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	p.Reload()
	if trusts(oldCA) || !trusts(newCA) {
		t.Fatal("Reload did not put the new bundle in service")
	}
}

func parseLeaf(der []byte) (*x509.Certificate, error) { return x509.ParseCertificate(der) }

func verifies(c *x509.Certificate, roots *x509.CertPool) bool {
	_, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err == nil
}
