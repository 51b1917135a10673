package serverlog_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/serverlog"
	"github.com/idemgate/idemgate/metrics"
)

// TestClassify: the error texts crypto/tls, crypto/x509 and net/http write
// for failed handshakes (local errors and peer alerts) map to their reason.
func TestClassify(t *testing.T) {
	for cause, want := range map[string]string{
		"client sent an HTTP request to an HTTPS server":           metrics.TLSNotTLS,
		"tls: first record does not look like a TLS handshake":     metrics.TLSNotTLS,
		"tls: client offered only unsupported versions: [302 301]": metrics.TLSProtocolVersion,
		"tls: unsupported SSLv2 handshake received":                metrics.TLSProtocolVersion,
		"remote error: tls: protocol version not supported":        metrics.TLSProtocolVersion,
		"tls: client didn't provide a certificate":                 metrics.TLSNoCertificate,
		"remote error: tls: certificate required":                  metrics.TLSNoCertificate,
		"tls: failed to verify certificate: x509: certificate has expired or is not yet valid: current time 2026-12-02T01:00:00Z is after 2026-01-01T00:00:00Z": metrics.TLSExpired,
		"remote error: tls: expired certificate":                                                   metrics.TLSExpired,
		"tls: failed to verify certificate: x509: certificate signed by unknown authority":         metrics.TLSUnknownCA,
		"remote error: tls: unknown certificate authority":                                         metrics.TLSUnknownCA,
		"remote error: tls: bad certificate":                                                       metrics.TLSBadCertificate,
		"tls: failed to verify certificate: x509: certificate specifies an incompatible key usage": metrics.TLSBadCertificate,
		"tls: failed to parse client certificate #0: x509: malformed certificate":                  metrics.TLSBadCertificate,
		"EOF": metrics.TLSClosed,
		"read tcp 127.0.0.1:443->127.0.0.1:5555: read: connection reset by peer": metrics.TLSClosed,
		"read tcp 127.0.0.1:443->127.0.0.1:5555: i/o timeout":                    metrics.TLSTimeout,
		"tls: no cipher suite supported by both client and server":               metrics.TLSOther,
		"remote error: tls: internal error":                                      metrics.TLSOther,
	} {
		if got := serverlog.Classify(cause); got != want {
			t.Errorf("Classify(%q) = %s, want %s", cause, got, want)
		}
	}
}

// TestHandshakeLinesCountedAndLimited: a handshake failure is counted each
// time and logged at debug at most once per reason and interval, with the
// number left out; every other server line stays a warning.
func TestHandshakeLinesCountedAndLimited(t *testing.T) {
	var out bytes.Buffer
	var mu sync.Mutex
	counts := map[string]int{}
	now := time.Unix(1000, 0)
	l := serverlog.New(serverlog.Options{
		Logger:   slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Count:    func(r string) { mu.Lock(); counts[r]++; mu.Unlock() },
		Interval: 5 * time.Second,
		Now:      func() time.Time { return now },
	})
	for range 3 {
		l.Printf("http: TLS handshake error from 127.0.0.1:4711: EOF")
	}
	l.Printf("http: TLS handshake error from [::1]:4712: remote error: tls: bad certificate")
	now = now.Add(6 * time.Second)
	l.Printf("http: TLS handshake error from 127.0.0.1:4713: EOF")
	l.Printf("http: Accept error: too many open files; retrying in 5ms")

	if counts[metrics.TLSClosed] != 4 || counts[metrics.TLSBadCertificate] != 1 {
		t.Errorf("counts %v, want 4 closed and 1 bad_certificate", counts)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		`level=DEBUG msg="TLS handshake failed" reason=closed remote=127.0.0.1:4711 err=EOF suppressed=0`,
		`level=DEBUG msg="TLS handshake failed" reason=bad_certificate remote=[::1]:4712 err="remote error: tls: bad certificate" suppressed=0`,
		`level=DEBUG msg="TLS handshake failed" reason=closed remote=127.0.0.1:4713 err=EOF suppressed=2`,
		`level=WARN msg="http: Accept error: too many open files; retrying in 5ms"`,
	}
	if len(lines) != len(want) {
		t.Fatalf("lines:\n%s\nwant %d", out.String(), len(want))
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], w) {
			t.Errorf("line %d: %s\nwant it to end with %s", i, lines[i], w)
		}
	}
}

// TestHandshakeCountedBelowDebug: at the info level nothing is logged for a
// handshake failure, and it is still counted.
func TestHandshakeCountedBelowDebug(t *testing.T) {
	var out bytes.Buffer
	n := 0
	l := serverlog.New(serverlog.Options{Logger: slog.New(slog.NewTextHandler(&out, nil)), Count: func(string) { n++ }})
	l.Printf("http: TLS handshake error from 127.0.0.1:4711: tls: client didn't provide a certificate")
	if n != 1 || out.Len() != 0 {
		t.Errorf("counted %d, logged %q; want 1 and nothing", n, out.String())
	}
}
