package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/internal/syncbuf"
	"github.com/idemgate/idemgate/internal/testcerts"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// tlsClient returns a client that trusts roots and presents cert (none
// when nil), with a fresh connection per request so each one handshakes.
func tlsClient(roots *x509.CertPool, cert *tls.Certificate) *http.Client {
	tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		// Always presented: Certificates alone would let the client keep
		// a certificate the server's CA list does not name to itself.
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}
}

func postWith(c *http.Client, url, key string) (int, http.Header, string, error) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"amount":5}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b), nil
}

// TestTLSClientCertOwner: owner: client-cert end to end on the real
// binary: the listener verifies client certificates
// against server.tls.client_ca_file, each verified certificate is its own
// owner, and expired, foreign and (with client_auth request) absent
// certificates never reach the upstream. The server certificate is read
// again when its files change.
func TestTLSClientCertOwner(t *testing.T) {
	dir := t.TempDir()
	clientCA := testcerts.NewCA(t, "client CA")
	otherCA := testcerts.NewCA(t, "someone else's CA")
	ln := testcerts.NewListener(t, dir, clientCA)
	certFile, keyFile, caFile, roots := ln.CertFile, ln.KeyFile, ln.CAFile, ln.Roots
	alice := clientCA.Issue(t, testcerts.Options{CommonName: "alice"}).TLS(t)
	bob := clientCA.Issue(t, testcerts.Options{CommonName: "bob"}).TLS(t)
	expired := clientCA.Issue(t, testcerts.Options{CommonName: "alice", Expired: true}).TLS(t)
	foreign := otherCA.Issue(t, testcerts.Options{CommonName: "alice"}).TLS(t)

	up := startUpstream(t)
	for _, mode := range []string{"request", "require"} {
		t.Run(mode, func(t *testing.T) {
			g := startGate(t, gateConfig{Upstream: up.URL,
				Extra:  fmt.Sprintf("server:\n  tls: {cert_file: %q, key_file: %q, client_ca_file: %q, client_auth: %s, min_version: '1.2'}\n", certFile, keyFile, caFile, mode),
				Routes: "  - name: orders\n    match: \"POST /v1/orders\"\n    owner: client-cert\n    scope: " + mode + "\n"})
			url := "https://" + strings.TrimPrefix(g.URL, "http://") + "/v1/orders"
			before := up.Total()
			key := "k-" + mode

			status, h, body, err := postWith(tlsClient(roots, &alice), url, key)
			if err != nil || status != 201 || h.Get("Idempotent-Replayed") != "" {
				t.Fatalf("alice first: %d %v %s", status, err, body)
			}
			status, h, _, err = postWith(tlsClient(roots, &alice), url, key)
			if err != nil || status != 201 || h.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("alice retry: %d %v %v", status, err, h)
			}
			// Another verified certificate is another owner: its own run.
			status, h, _, err = postWith(tlsClient(roots, &bob), url, key)
			if err != nil || status != 201 || h.Get("Idempotent-Replayed") != "" {
				t.Fatalf("bob: %d %v %v", status, err, h)
			}
			if n := up.Total() - before; n != 2 {
				t.Fatalf("upstream ran %d times, want 2", n)
			}
			for name, c := range map[string]*tls.Certificate{"expired": &expired, "wrong CA": &foreign} {
				if status, _, _, err := postWith(tlsClient(roots, c), url, key); err == nil {
					t.Errorf("%s certificate: answered %d, want a failed handshake", name, status)
				}
			}
			status, _, body, err = postWith(tlsClient(roots, nil), url, key)
			switch mode {
			case "request":
				if err != nil || status != 400 || !strings.Contains(body, "missing-owner") || !strings.Contains(body, "no verified client certificate") {
					t.Errorf("no certificate: %d %v %s", status, err, body)
				}
			case "require":
				if err == nil {
					t.Errorf("no certificate with client_auth require: answered %d", status)
				}
			}
			if n := up.Total() - before; n != 2 {
				t.Fatalf("upstream ran %d times after the refused ones, want 2", n)
			}
		})
	}

	t.Run("rotation", func(t *testing.T) {
		g := startGate(t, gateConfig{Upstream: up.URL,
			Extra: fmt.Sprintf("server:\n  tls: {cert_file: %q, key_file: %q}\n", certFile, keyFile)})
		addr := strings.TrimPrefix(g.URL, "http://")
		serial := func() string {
			c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
		}
		if got := serial(); got != mustLeafSerial(t, ln.Server.DER) {
			t.Fatalf("serving serial %s, want the first certificate", got)
		}
		next := ln.ServerCA.Issue(t, testcerts.Options{CommonName: "idemgate", Server: true})
		// As cert-manager does: both files replaced while serving.
		testcerts.Write(t, dir, "tls.key", next.KeyPEM)
		testcerts.Write(t, dir, "tls.crt", next.CertPEM)
		want := mustLeafSerial(t, next.DER)
		if !gatetest.Until(5*time.Second, func() bool { return serial() == want }) {
			t.Fatalf("the rotated certificate is not served after 5s:\n%s", g.Logs())
		}
		if !strings.Contains(g.Logs(), "TLS certificate reloaded") {
			t.Errorf("no reload line:\n%s", g.Logs())
		}
	})
}

func mustLeafSerial(t *testing.T, der []byte) string {
	t.Helper()
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}

// TestUpstreamTLS: an https upstream that requires a client certificate
// and whose certificate names only backend.internal is reached with
// upstream.tls.ca_file, server_name and the client pair; without
// server_name the certificate does not verify and nothing is forwarded.
func TestUpstreamTLS(t *testing.T) {
	dir := t.TempDir()
	upCA := testcerts.NewCA(t, "upstream CA")
	idemCA := testcerts.NewCA(t, "idemgate client CA")
	upCert := upCA.Issue(t, testcerts.Options{CommonName: "backend", Server: true, DNSNames: []string{"backend.internal"}})
	client := idemCA.Issue(t, testcerts.Options{CommonName: "idemgate"})
	pool := x509.NewCertPool()
	pool.AddCert(idemCA.Cert)
	var sawClient atomic.Value // the backend's goroutine writes, the test reads
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawClient.Store(r.TLS.VerifiedChains[0][0].Subject.CommonName)
		w.WriteHeader(201)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	backend.TLS = &tls.Config{Certificates: []tls.Certificate{upCert.TLS(t)}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	backend.StartTLS()
	t.Cleanup(backend.Close)
	caFile := testcerts.Write(t, dir, "up-ca.crt", upCA.PEM)
	certFile := testcerts.Write(t, dir, "client.crt", client.CertPEM)
	keyFile := testcerts.Write(t, dir, "client.key", client.KeyPEM)

	g2 := startGateYAML(t, upstreamTLSYAML(backend.URL, fmt.Sprintf("ca_file: %q, server_name: backend.internal, cert_file: %q, key_file: %q", caFile, certFile, keyFile)))
	a := mustPost(t, g2.URL+"/v1/orders", "alice", "k1", `{}`)
	if a.Status != 201 || sawClient.Load() != "idemgate" {
		t.Fatalf("through mTLS: %d %s (backend saw client %v)\n%s", a.Status, a.Body, sawClient.Load(), g2.Logs())
	}
	g3 := startGateYAML(t, upstreamTLSYAML(backend.URL, fmt.Sprintf("ca_file: %q, cert_file: %q, key_file: %q", caFile, certFile, keyFile)))
	if a := mustPost(t, g3.URL+"/v1/orders", "alice", "k1", `{}`); a.Status != 502 {
		t.Fatalf("certificate for another name: %d %s", a.Status, a.Body)
	}
}

// startGateYAML starts idemgate on free loopback ports with body as the
// rest of its config file (everything but listen and admin), for configs
// the gateConfig template cannot express, and waits for its store as
// startGate does (--wait-store); stopped in t.Cleanup.
func startGateYAML(t *testing.T, body string) *Gate {
	t.Helper()
	listen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	adminListen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(t))
	yaml := fmt.Sprintf("listen: %q\nadmin: {listen: %q, token: %q}\nlog: {format: json, level: info}\n", listen, adminListen, testAdminToken) + body
	path := filepath.Join(t.TempDir(), "idemgate.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	g := &Gate{t: t, URL: "http://" + listen, AdminURL: "http://" + adminListen, config: path,
		args: []string{"serve", "--config", path, "--wait-store", "10s"}, logs: &syncbuf.Buffer{}}
	g.Start()
	t.Cleanup(func() {
		g.Stop()
		if t.Failed() {
			t.Logf("idemgate logs:\n%s", g.logs.String())
		}
	})
	return g
}

// testAdminToken is the admin token of gates started by startGateYAML.
const testAdminToken = "e2e-admin-token"

// upstreamTLSYAML is a gate on the memory store, owners by X-User, whose
// upstream is url over TLS with the settings tls (upstream.tls's mapping,
// without its braces).
func upstreamTLSYAML(url, tls string) string {
	return fmt.Sprintf(`upstream:
  url: %q
  timeout: 10s
  tls: {%s}
store: {driver: memory}
defaults: {owner: "header:X-User"}
`, url, tls)
}

// TestSecurityTLSClientCertOwnerOtherName: with owner: client-cert, alice and bob
// hold certificates of one CA with one subject (O=Example Corp, OU=Staff)
// that differ only in an otherName alternative name (a UPN). bob sending
// alice's key and body must run his own operation, never get alice's
// response; a renewed certificate of alice's replays hers. Before the fix
// the owner ignored otherName and bob got 201 Idempotent-Replayed: true
// with alice's body.
func TestSecurityTLSClientCertOwnerOtherName(t *testing.T) {
	dir := t.TempDir()
	clientCA := testcerts.NewCA(t, "corp CA")
	ln := testcerts.NewListener(t, dir, clientCA)
	certFile, keyFile, caFile, roots := ln.CertFile, ln.KeyFile, ln.CAFile, ln.Roots
	staff := func(upn string) tls.Certificate {
		return clientCA.Issue(t, testcerts.Options{Organization: []string{"Example Corp"}, OrganizationalUnit: []string{"Staff"}, UPN: upn}).TLS(t)
	}
	alice, bob, aliceRenewed := staff("alice@corp.example"), staff("bob@corp.example"), staff("alice@corp.example")

	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL,
		Extra:  fmt.Sprintf("server:\n  tls: {cert_file: %q, key_file: %q, client_ca_file: %q, client_auth: require}\n", certFile, keyFile, caFile),
		Routes: "  - name: orders\n    match: \"POST /v1/orders\"\n    owner: client-cert\n"})
	url := "https://" + strings.TrimPrefix(g.URL, "http://") + "/v1/orders"

	status, h, aliceBody, err := postWith(tlsClient(roots, &alice), url, "k")
	if err != nil || status != 201 || h.Get("Idempotent-Replayed") != "" {
		t.Fatalf("alice: %d %v %s", status, err, aliceBody)
	}
	status, h, bobBody, err := postWith(tlsClient(roots, &bob), url, "k")
	if err != nil || status != 201 || h.Get("Idempotent-Replayed") != "" || bobBody == aliceBody {
		t.Fatalf("bob with alice's key and body: %d %v replayed=%q %s, want his own run, not alice's response %s", status, err, h.Get("Idempotent-Replayed"), bobBody, aliceBody)
	}
	status, h, body, err := postWith(tlsClient(roots, &aliceRenewed), url, "k")
	if err != nil || status != 201 || h.Get("Idempotent-Replayed") != "true" || body != aliceBody {
		t.Fatalf("alice with a renewed certificate: %d %v %v %s, want the replay of %s", status, err, h, body, aliceBody)
	}
	if n := up.Total(); n != 2 {
		t.Fatalf("upstream ran %d times, want 2 (alice once, bob once)", n)
	}
}
