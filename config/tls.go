package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync/atomic"

	"github.com/idemgate/idemgate/internal/certfile"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/identity"
)

// Client authentication modes of server.tls.client_auth.
const (
	ClientAuthNone    = "none"
	ClientAuthRequest = "request"
	ClientAuthRequire = "require"
)

// ServerTLSConfig is `server.tls:`: TLS on the proxy listener. Without
// CertFile the listener speaks plain HTTP.
type ServerTLSConfig struct {
	// CertFile and KeyFile are the PEM certificate chain and key; both or
	// neither. They are read again when they change (cert-manager).
	CertFile, KeyFile string
	// MinVersion is "1.2" (default) or "1.3".
	MinVersion string
	// ClientCAFile is the PEM bundle of CAs that sign client certificates
	// (mTLS); required with ClientAuth request or require.
	ClientCAFile string
	// ClientAuth is none (default), request (a certificate, if sent, must
	// verify) or require (every connection must present a verified one).
	ClientAuth string
}

// Enabled reports whether the proxy listener serves TLS.
func (t ServerTLSConfig) Enabled() bool { return t.CertFile != "" }

// VerifiesClients reports whether client certificates are verified, which
// owner: client-cert needs.
func (t ServerTLSConfig) VerifiesClients() bool {
	return t.ClientAuth == ClientAuthRequest || t.ClientAuth == ClientAuthRequire
}

// UpstreamTLSConfig is `upstream.tls:`: how idemgate verifies the upstream
// and authenticates to it, for every https upstream (the global one and the
// routes' own).
type UpstreamTLSConfig struct {
	// CAFile is a PEM bundle of CAs trusted for the upstream instead of the
	// system roots.
	CAFile string
	// ServerName is the name verified in the global upstream's certificate
	// (and sent as SNI) instead of upstream.url's host; routes' own
	// upstreams are verified against their own host.
	ServerName string
	// CertFile and KeyFile are a client certificate for mTLS to the
	// upstream; both or neither.
	CertFile, KeyFile string
	// InsecureSkipVerify accepts any upstream certificate: for tests only,
	// and logged as a warning at start.
	InsecureSkipVerify bool
}

// TLSFiles holds the certificate and CA files of server.tls and
// upstream.tls, each read again when it changes (at most once per second,
// at the next handshake that needs it) and on Reload (SIGHUP). A file that
// does not load keeps the previous one in service (certfile).
type TLSFiles struct {
	server       ServerTLSConfig
	upstream     UpstreamTLSConfig
	serverCert   *certfile.Reloader
	clientCAs    *certfile.Pool
	upstreamCAs  *certfile.Pool
	upstreamCert *certfile.Reloader
}

// OpenTLSFiles loads every file of server.tls and upstream.tls that is
// set; observe (nil: none) is told of each later reload attempt by the
// file's config key. An error names the key whose file does not load now.
func (c *Config) OpenTLSFiles(log *slog.Logger, observe certfile.Observer) (*TLSFiles, error) {
	f := &TLSFiles{server: c.Server.TLS, upstream: c.Upstream.TLS}
	s, u := c.Server.TLS, c.Upstream.TLS
	var err error
	if s.Enabled() {
		if f.serverCert, err = certfile.New(s.CertFile, s.KeyFile, log); err != nil {
			return nil, fmt.Errorf("server.tls: %w", err)
		}
		f.serverCert.Named("server.tls.cert_file", observe)
		if s.VerifiesClients() {
			if f.clientCAs, err = certfile.NewPool(s.ClientCAFile, "server.tls.client_ca_file", log, observe); err != nil {
				return nil, fmt.Errorf("server.tls.client_ca_file: %w", err)
			}
		}
	}
	if u.CAFile != "" && !u.InsecureSkipVerify {
		if f.upstreamCAs, err = certfile.NewPool(u.CAFile, "upstream.tls.ca_file", log, observe); err != nil {
			return nil, fmt.Errorf("upstream.tls.ca_file: %w", err)
		}
	}
	if u.CertFile != "" {
		if f.upstreamCert, err = certfile.New(u.CertFile, u.KeyFile, log); err != nil {
			return nil, fmt.Errorf("upstream.tls.cert_file: %w", err)
		}
		f.upstreamCert.Named("upstream.tls.cert_file", observe)
	}
	return f, nil
}

// Reload reads every file again now (SIGHUP); those that do not load keep
// their previous contents in service.
func (f *TLSFiles) Reload() {
	if f.serverCert != nil {
		f.serverCert.Reload()
	}
	if f.clientCAs != nil {
		f.clientCAs.Reload()
	}
	if f.upstreamCAs != nil {
		f.upstreamCAs.Reload()
	}
	if f.upstreamCert != nil {
		f.upstreamCert.Reload()
	}
}

// Server returns the proxy listener's tls.Config (nil without TLS): the
// certificate from GetCertificate, the minimum version and, with client
// verification, the current client CA pool for every new handshake
// (GetConfigForClient), so connections after a CA file change verify
// against the new bundle and established ones are left alone.
func (f *TLSFiles) Server() *tls.Config {
	if f.serverCert == nil {
		return nil
	}
	t := f.server
	out := &tls.Config{GetCertificate: f.serverCert.GetCertificate, MinVersion: tlsVersion(t.MinVersion), NextProtos: []string{"h2", "http/1.1"}}
	if f.clientCAs == nil {
		return out
	}
	out.ClientAuth = tls.VerifyClientCertIfGiven
	if t.ClientAuth == ClientAuthRequire {
		out.ClientAuth = tls.RequireAndVerifyClientCert
	}
	out.ClientCAs = f.clientCAs.Current()
	// One derived config per pool: a handshake clones only after a CA
	// file change.
	type derived struct {
		pool *x509.CertPool
		conf *tls.Config
	}
	var cur atomic.Pointer[derived]
	out.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		pool := f.clientCAs.Current()
		if d := cur.Load(); d != nil && d.pool == pool {
			return d.conf, nil
		}
		c := out.Clone()
		c.GetConfigForClient = nil
		c.ClientCAs = pool
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			return verifyResumed(cs, pool)
		}
		cur.Store(&derived{pool: pool, conf: c})
		return c, nil
	}
	return out
}

// verifyResumed checks a resumed session's client certificate against pool:
// resumption skips verification, and a session of a client whose CA has
// since left the bundle must not outlive the bundle change.
func verifyResumed(cs tls.ConnectionState, pool *x509.CertPool) error {
	if !cs.DidResume || len(cs.PeerCertificates) == 0 {
		return nil
	}
	opts := x509.VerifyOptions{Roots: pool, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return fmt.Errorf("resumed session: client certificate no longer verifies against server.tls.client_ca_file: %w", err)
	}
	return nil
}

// UpstreamCAs returns the current pool of upstream.tls.ca_file, nil when
// it is not set (the system roots) or insecure_skip_verify is. The pointer
// changes only when the file changed and loaded, so a transport built for
// one pool is rebuilt when it differs.
func (f *TLSFiles) UpstreamCAs() *x509.CertPool {
	if f.upstreamCAs == nil {
		return nil
	}
	return f.upstreamCAs.Current()
}

// Upstream returns the tls.Config for connections to an https upstream,
// trusting roots (nil: the system roots; see UpstreamCAs); serverName is
// the name to verify ("" for the URL's host). Verification is the standard
// library's, hostname included. The client certificate of
// upstream.tls.cert_file is the current one at each handshake.
func (f *TLSFiles) Upstream(serverName string, roots *x509.CertPool) *tls.Config {
	t := f.upstream
	out := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, RootCAs: roots, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // opt-in, warned about at start
	if f.upstreamCert != nil {
		out.GetClientCertificate = f.upstreamCert.GetClientCertificate
	}
	return out
}

func tlsVersion(v string) uint16 {
	if v == "1.3" {
		return tls.VersionTLS13
	}
	return tls.VersionTLS12
}

// validateTLS checks server.tls, upstream.tls and server.trusted_proxies:
// pairs set together, known modes, files that load, and an owner:
// client-cert route only where client certificates are verified.
func (c *Config) validateTLS() []error {
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, &policy.FieldError{Path: path, Err: fmt.Errorf(format, args...)})
	}
	s := c.Server.TLS
	pair := func(prefix, cert, key string) bool {
		switch {
		case cert == "" && key != "":
			bad(prefix+".key_file", "is set but %s.cert_file is not: a TLS key needs its certificate", prefix)
		case cert != "" && key == "":
			bad(prefix+".cert_file", "is set but %s.key_file is not: a TLS certificate needs its key", prefix)
		default:
			return cert != ""
		}
		return false
	}
	if pair("server.tls", s.CertFile, s.KeyFile) {
		if _, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile); err != nil {
			bad("server.tls.cert_file", "does not load with server.tls.key_file: %v", err)
		}
	}
	if c.Server.H2C && s.Enabled() {
		// The listener is TLS: HTTP/2 is offered by ALPN there, and a
		// prior-knowledge client without TLS could not connect anyway.
		bad("server.h2c", "serves HTTP/2 without TLS on a plain listener; with server.tls the listener speaks TLS and offers HTTP/2 by ALPN already: drop server.h2c")
	}
	if s.MinVersion != "1.2" && s.MinVersion != "1.3" {
		bad("server.tls.min_version", "%q must be 1.2 or 1.3", s.MinVersion)
	}
	switch s.ClientAuth {
	case ClientAuthNone:
		if s.ClientCAFile != "" {
			bad("server.tls.client_auth", "is none but server.tls.client_ca_file is set: say request or require, or drop the CA file")
		}
	case ClientAuthRequest, ClientAuthRequire:
		if !s.Enabled() {
			bad("server.tls.client_auth", "%s needs TLS on the listener (server.tls.cert_file and key_file)", s.ClientAuth)
		}
		if s.ClientCAFile == "" {
			bad("server.tls.client_ca_file", "is required with server.tls.client_auth %s: the CAs that sign client certificates", s.ClientAuth)
		} else if _, err := certfile.LoadPool(s.ClientCAFile); err != nil {
			bad("server.tls.client_ca_file", "%v", err)
		}
	default:
		bad("server.tls.client_auth", "%q must be none, request or require", s.ClientAuth)
	}
	u := c.Upstream.TLS
	if pair("upstream.tls", u.CertFile, u.KeyFile) {
		if _, err := tls.LoadX509KeyPair(u.CertFile, u.KeyFile); err != nil {
			bad("upstream.tls.cert_file", "does not load with upstream.tls.key_file: %v", err)
		}
	}
	if u.CAFile != "" {
		if _, err := certfile.LoadPool(u.CAFile); err != nil {
			bad("upstream.tls.ca_file", "%v", err)
		}
	}
	if u.InsecureSkipVerify && (u.CAFile != "" || u.ServerName != "") {
		bad("upstream.tls.insecure_skip_verify", "is true, which ignores upstream.tls.ca_file and server_name: set one or the other")
	}
	for i, p := range c.Server.TrustedProxies {
		if _, err := netip.ParsePrefix(p); err != nil {
			if _, aerr := netip.ParseAddr(p); aerr != nil {
				bad(fmt.Sprintf("server.trusted_proxies[%d]", i), "%q is neither a CIDR (10.0.0.0/8) nor an IP address", p)
			}
		}
	}
	if c.Policy != nil && !s.VerifiesClients() {
		routes := c.Policy.Routes()
		for i, r := range routes {
			if !r.Owner.Uses(identity.OwnerClientCert) {
				continue
			}
			path := fmt.Sprintf("routes[%d].owner", i)
			if i == len(routes)-1 {
				path = "defaults.owner"
			}
			bad(path, "client-cert needs verified client certificates, so server.tls.client_auth request or require (with server.tls.cert_file, key_file and client_ca_file); without them no request has an owner and every keyed request would be 400 missing-owner")
		}
	}
	return errs
}

// TrustedPrefixes returns server.trusted_proxies as prefixes (an address
// alone is a /32 or /128); entries that do not parse are left out, as
// Validate reports them.
func (c *Config) TrustedPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range c.Server.TrustedProxies {
		p = strings.TrimSpace(p)
		if pr, err := netip.ParsePrefix(p); err == nil {
			out = append(out, pr.Masked())
		} else if a, err := netip.ParseAddr(p); err == nil {
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return out
}
