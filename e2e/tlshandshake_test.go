package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testcerts"
	"github.com/idemgate/idemgate/metrics"
)

// TestTLSHandshakeErrorsCounted: failed TLS handshakes on the proxy
// listener (a client certificate from another CA, an expired one, none
// with client_auth require, plain HTTP on the TLS port) are counted in
// idemgate_tls_handshake_errors_total by reason, every reason's series
// exists from the start, and they are logged at debug at most once per
// reason and interval, never as warnings. A verified client still gets
// through.
func TestTLSHandshakeErrorsCounted(t *testing.T) {
	dir := t.TempDir()
	clientCA := testcerts.NewCA(t, "client CA")
	otherCA := testcerts.NewCA(t, "someone else's CA")
	ln := testcerts.NewListener(t, dir, clientCA)
	certFile, keyFile, caFile, roots := ln.CertFile, ln.KeyFile, ln.CAFile, ln.Roots
	alice := clientCA.Issue(t, testcerts.Options{CommonName: "alice"}).TLS(t)
	expired := clientCA.Issue(t, testcerts.Options{CommonName: "alice", Expired: true}).TLS(t)
	foreign := otherCA.Issue(t, testcerts.Options{CommonName: "alice"}).TLS(t)

	// The environment overrides the file's log level (config precedence).
	t.Setenv("IDEMGATE_LOG_LEVEL", "debug")
	up := startUpstream(t)
	g := startGate(t, gateConfig{Upstream: up.URL,
		Extra: fmt.Sprintf("server:\n  tls: {cert_file: %q, key_file: %q, client_ca_file: %q, client_auth: require}\n", certFile, keyFile, caFile)})
	addr := strings.TrimPrefix(g.URL, "http://")
	url := "https://" + addr + "/v1/orders"
	series := func(reason string) string {
		return fmt.Sprintf("idemgate_tls_handshake_errors_total{reason=%q}", reason)
	}
	for _, r := range metrics.TLSHandshakeReasons {
		if v := metricValue(t, g, series(r)); v != 0 {
			t.Errorf("%s at start: %v, want 0", series(r), v)
		}
	}

	const plainTries = 3
	for range plainTries {
		resp, err := http.Get("http://" + addr + "/v1/orders")
		if err != nil {
			t.Fatalf("plain HTTP on the TLS port: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP on the TLS port: %d, want net/http's 400", resp.StatusCode)
		}
	}
	for name, c := range map[string]*tls.Certificate{"wrong CA": &foreign, "expired": &expired, "none": nil} {
		if status, _, _, err := postWith(tlsClient(roots, c), url, "k-"+name); err == nil {
			t.Errorf("%s certificate: answered %d, want a failed handshake", name, status)
		}
	}
	// A verified client's handshake succeeds (its request then lacks the
	// X-User owner, which is beside the point).
	if _, _, _, err := postWith(tlsClient(roots, &alice), url, "k1"); err != nil {
		t.Fatalf("verified client: %v", err)
	}

	want := map[string]float64{metrics.TLSNotTLS: plainTries, metrics.TLSUnknownCA: 1, metrics.TLSExpired: 1, metrics.TLSNoCertificate: 1}
	// The server counts a failure after the client has seen it: wait for
	// the counts, then check nothing else was counted.
	deadline := time.Now().Add(10 * time.Second)
	for {
		missing := ""
		for r, n := range want {
			if v := metricValue(t, g, series(r)); v != n {
				missing += fmt.Sprintf(" %s=%v (want %v)", r, v, n)
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("handshake failures not counted:%s\n%s", missing, g.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, r := range metrics.TLSHandshakeReasons {
		if _, ok := want[r]; !ok {
			if v := metricValue(t, g, series(r)); v != 0 {
				t.Errorf("%s: %v, want 0", series(r), v)
			}
		}
	}

	logs := g.Logs()
	debugLines := map[string]int{}
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `"level":"WARN"`) && strings.Contains(strings.ToLower(line), "handshake") {
			t.Errorf("a handshake failure logged as a warning: %s", line)
		}
		if strings.Contains(line, `"msg":"TLS handshake failed"`) {
			if !strings.Contains(line, `"level":"DEBUG"`) {
				t.Errorf("handshake line not at debug: %s", line)
			}
			for r := range want {
				if strings.Contains(line, fmt.Sprintf(`"reason":%q`, r)) {
					debugLines[r]++
				}
			}
		}
	}
	for r := range want {
		// The plain HTTP tries come within the interval: one line.
		if debugLines[r] != 1 {
			t.Errorf("%d debug lines for %s, want 1 (rate-limited):\n%s", debugLines[r], r, logs)
		}
	}
}
