package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/internal/testcerts"
)

// rotationDeadline bounds how long a test waits for a changed file to be
// seen: files are looked at again at most once a second, at a handshake.
const rotationDeadline = 10 * time.Second

// logHas reports whether one line of the gate's log holds every one of parts.
func logHas(g *Gate, parts ...string) bool {
	for line := range strings.SplitSeq(g.Logs(), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// TestClientCARotation: server.tls.client_ca_file is read again when it
// changes, without a restart. A client whose certificate comes from a new
// CA is refused while the file holds the old CA only; a broken file written
// meanwhile keeps the old CA in service (the old client still gets in, the
// failure is logged and counted); once the file holds the old and the new
// CA, the new client is accepted and the old one still is.
func TestClientCARotation(t *testing.T) {
	dir := t.TempDir()
	oldCA := testcerts.NewCA(t, "client CA 2025")
	newCA := testcerts.NewCA(t, "client CA 2026")
	ln := testcerts.NewListener(t, dir, oldCA)
	certFile, keyFile, caFile, roots := ln.CertFile, ln.KeyFile, ln.CAFile, ln.Roots
	oldClient := oldCA.Issue(t, testcerts.Options{CommonName: "old"}).TLS(t)
	newClient := newCA.Issue(t, testcerts.Options{CommonName: "new"}).TLS(t)

	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL,
		Extra:  fmt.Sprintf("server:\n  tls: {cert_file: %q, key_file: %q, client_ca_file: %q, client_auth: require}\n", certFile, keyFile, caFile),
		Routes: "  - name: orders\n    match: \"POST /v1/orders\"\n    owner: client-cert\n"})
	url := "https://" + strings.TrimPrefix(g.URL, "http://") + "/v1/orders"
	n := 0
	accepted := func(c *tls.Certificate) bool {
		n++
		status, _, _, err := postWith(tlsClient(roots, c), url, fmt.Sprintf("k%d", n))
		return err == nil && status == 201
	}
	if !accepted(&oldClient) {
		t.Fatal("the old CA's client is refused at start")
	}
	if accepted(&newClient) {
		t.Fatal("the new CA's client is accepted before its CA is in the file")
	}

	// A broken write (a truncated bundle): the previous pool stays.
	testcerts.Write(t, dir, "clients.crt", []byte("-----BEGIN CERTIFICATE-----\nMIIB\n"))
	if !gatetest.Until(rotationDeadline, func() bool {
		if !accepted(&oldClient) {
			t.Fatal("the old CA's client is refused after a broken CA file was written: the previous pool must stay in service")
		}
		return logHas(g, "CA file changed but does not load", "server.tls.client_ca_file")
	}) {
		t.Fatalf("no log line for the CA file that does not load")
	}
	if v := metricValue(t, g, `idemgate_tls_reloads_total{file="server.tls.client_ca_file",result="failure"}`); v < 1 {
		t.Errorf("idemgate_tls_reloads_total failure = %v, want >= 1", v)
	}
	if accepted(&newClient) {
		t.Fatal("the new CA's client is accepted with a broken CA file")
	}

	// The next CA added before the old one expires.
	testcerts.Write(t, dir, "clients.crt", append(append([]byte{}, oldCA.PEM...), newCA.PEM...))
	if !gatetest.Until(rotationDeadline, func() bool { return accepted(&newClient) }) {
		t.Fatalf("the new CA's client is still refused %v after the CA file holds both CAs (no restart)", rotationDeadline)
	}
	if !accepted(&oldClient) {
		t.Fatal("the old CA's client is refused after the CA file holds both CAs")
	}
	if !logHas(g, "CA file reloaded", "server.tls.client_ca_file") {
		t.Error("no log line for the reloaded CA file")
	}
	if v := metricValue(t, g, `idemgate_tls_reloads_total{file="server.tls.client_ca_file",result="success"}`); v < 1 {
		t.Errorf("idemgate_tls_reloads_total success = %v, want >= 1", v)
	}

	// The old CA leaves the bundle: its clients are refused, also one
	// that resumes a TLS session from before (resumption skips the
	// certificate check unless idemgate repeats it).
	resuming := tlsClient(roots, &oldClient)
	resuming.Transport.(*http.Transport).TLSClientConfig.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	if status, _, _, err := postWith(resuming, url, "resume-1"); err != nil || status != 201 {
		t.Fatalf("old client with a session cache: %d %v", status, err)
	}
	testcerts.Write(t, dir, "clients.crt", newCA.PEM)
	if !gatetest.Until(rotationDeadline, func() bool { return !accepted(&oldClient) }) {
		t.Fatalf("the old CA's client is still accepted %v after its CA left the file", rotationDeadline)
	}
	if status, _, _, err := postWith(resuming, url, "resume-2"); err == nil {
		t.Fatalf("the old CA's client resuming an earlier session: answered %d, want a refused handshake", status)
	}
	if !accepted(&newClient) {
		t.Fatal("the new CA's client is refused after the old CA left the file")
	}
}

// rotatingBackend is an https upstream whose certificate and trusted
// client CAs the test swaps while it runs. Keep-alives are off, so every
// request is a new handshake and sees the current settings on both sides.
type rotatingBackend struct {
	*httptest.Server
	cert      atomic.Pointer[tls.Certificate]
	clientCAs atomic.Pointer[x509.CertPool]
	sawClient atomic.Value // CommonName of the last verified client
}

func startRotatingBackend(t *testing.T, cert tls.Certificate, clientCAs *x509.CertPool) *rotatingBackend {
	b := &rotatingBackend{}
	b.cert.Store(&cert)
	b.clientCAs.Store(clientCAs)
	b.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.VerifiedChains) > 0 {
			b.sawClient.Store(r.TLS.VerifiedChains[0][0].Subject.CommonName)
		}
		w.WriteHeader(201)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*b.cert.Load()}}
		if pool := b.clientCAs.Load(); pool != nil {
			c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
		}
		return c, nil
	}
	b.TLS = base
	b.Config.SetKeepAlivesEnabled(false)
	b.StartTLS()
	t.Cleanup(b.Close)
	return b
}

func poolOf(cas ...*testcerts.CA) *x509.CertPool {
	p := x509.NewCertPool()
	for _, ca := range cas {
		p.AddCert(ca.Cert)
	}
	return p
}

// TestUpstreamClientCertRotation: upstream.tls.cert_file and key_file are
// read again on SIGHUP (and when they change), without a restart. The
// backend trusts the old client CA, then both, and idemgate's client pair
// is replaced by one from the new CA; after the SIGHUP the backend drops
// the old CA, and the next request reaches it with the new certificate.
func TestUpstreamClientCertRotation(t *testing.T) {
	dir := t.TempDir()
	upCA := testcerts.NewCA(t, "upstream CA")
	oldCA := testcerts.NewCA(t, "idemgate client CA 2025")
	newCA := testcerts.NewCA(t, "idemgate client CA 2026")
	upCert := upCA.Issue(t, testcerts.Options{CommonName: "backend", Server: true, DNSNames: []string{"backend.internal"}})
	oldClient := oldCA.Issue(t, testcerts.Options{CommonName: "idemgate-2025"})
	newClient := newCA.Issue(t, testcerts.Options{CommonName: "idemgate-2026"})
	backend := startRotatingBackend(t, upCert.TLS(t), poolOf(oldCA))
	caFile := testcerts.Write(t, dir, "up-ca.crt", upCA.PEM)
	certFile := testcerts.Write(t, dir, "client.crt", oldClient.CertPEM)
	keyFile := testcerts.Write(t, dir, "client.key", oldClient.KeyPEM)

	g := startGateYAML(t, upstreamTLSYAML(backend.URL, fmt.Sprintf("ca_file: %q, server_name: backend.internal, cert_file: %q, key_file: %q", caFile, certFile, keyFile)))
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "k1", `{}`); a.Status != 201 || backend.sawClient.Load() != "idemgate-2025" {
		t.Fatalf("before the rotation: %d %s (backend saw %v)", a.Status, a.Body, backend.sawClient.Load())
	}

	// The backend accepts both CAs while idemgate's pair is renewed.
	backend.clientCAs.Store(poolOf(oldCA, newCA))
	testcerts.Write(t, dir, "client.key", newClient.KeyPEM)
	testcerts.Write(t, dir, "client.crt", newClient.CertPEM)
	g.send(syscall.SIGHUP)
	if !gatetest.Until(rotationDeadline, func() bool { return logHas(g, "TLS certificate reloaded", "upstream.tls.cert_file") }) {
		t.Errorf("no reload line for upstream.tls.cert_file %v after SIGHUP", rotationDeadline)
	}
	// Then it drops the old CA: only the renewed certificate gets in.
	backend.clientCAs.Store(poolOf(newCA))
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "k2", `{}`); a.Status != 201 || backend.sawClient.Load() != "idemgate-2026" {
		t.Fatalf("after the renewal and SIGHUP, without restart: %d %s (backend saw %v), want 201 with the new certificate", a.Status, a.Body, backend.sawClient.Load())
	}
	if v := metricValue(t, g, `idemgate_tls_reloads_total{file="upstream.tls.cert_file",result="success"}`); v < 1 {
		t.Errorf("idemgate_tls_reloads_total success = %v, want >= 1", v)
	}
}

// TestUpstreamCARotation: upstream.tls.ca_file is read again when it
// changes, without a restart, and hostname verification stays: the backend
// moves to a certificate from a new CA while idemgate's CA file gains the
// new CA; requests then reach it, and a certificate of the new CA for
// another name is still refused (502, nothing forwarded).
func TestUpstreamCARotation(t *testing.T) {
	dir := t.TempDir()
	oldCA := testcerts.NewCA(t, "upstream CA 2025")
	newCA := testcerts.NewCA(t, "upstream CA 2026")
	oldCert := oldCA.Issue(t, testcerts.Options{CommonName: "backend", Server: true, DNSNames: []string{"backend.internal"}})
	newCert := newCA.Issue(t, testcerts.Options{CommonName: "backend", Server: true, DNSNames: []string{"backend.internal"}})
	wrongName := newCA.Issue(t, testcerts.Options{CommonName: "other", Server: true, DNSNames: []string{"other.internal"}})
	backend := startRotatingBackend(t, oldCert.TLS(t), nil)
	caFile := testcerts.Write(t, dir, "up-ca.crt", oldCA.PEM)

	g := startGateYAML(t, upstreamTLSYAML(backend.URL, fmt.Sprintf("ca_file: %q, server_name: backend.internal", caFile)))
	get := func() int {
		resp, err := http.Get(g.URL + "/v1/ping")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := get(); s != 201 {
		t.Fatalf("before the rotation: %d", s)
	}
	backend.cert.Store(func() *tls.Certificate { c := newCert.TLS(t); return &c }())
	if s := get(); s != 502 {
		t.Fatalf("a certificate of a CA not in ca_file: %d, want 502", s)
	}
	testcerts.Write(t, dir, "up-ca.crt", append(append([]byte{}, oldCA.PEM...), newCA.PEM...))
	if !gatetest.Until(rotationDeadline, func() bool { return get() == 201 }) {
		t.Fatalf("the new CA's certificate is still refused %v after ca_file holds it (no restart)", rotationDeadline)
	}
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "k1", `{}`); a.Status != 201 {
		t.Fatalf("keyed request after the rotation: %d %s", a.Status, a.Body)
	}
	// Hostname verification is kept with the new pool.
	backend.cert.Store(func() *tls.Certificate { c := wrongName.TLS(t); return &c }())
	if a := mustPost(t, g.URL+"/v1/orders", "alice", "k2", `{}`); a.Status != 502 {
		t.Fatalf("a certificate of the new CA for another name: %d %s, want 502", a.Status, a.Body)
	}
	if !logHas(g, "CA file reloaded", "upstream.tls.ca_file") {
		t.Error("no log line for the reloaded upstream CA file")
	}
}
