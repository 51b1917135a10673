package main

import (
	"crypto/x509"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/proxy"
)

// newUpstreamTransport returns the transport to every upstream: proxy's
// defaults with upstream.tls (CA, client certificate). upstream.tls.server_name
// names the global upstream's certificate only; routes' own upstreams (any
// other host) go through a transport with the same settings that verifies
// their own host. Each rebuilds its http.Transport when upstream.tls.ca_file
// changed (rotatingTransport); the client certificate is the current one at
// every handshake.
func newUpstreamTransport(cfg *config.Config, files *config.TLSFiles) http.RoundTripper {
	build := func(serverName string) http.RoundTripper {
		mk := func(roots *x509.CertPool) *http.Transport {
			t := proxy.NewTransport(cfg.Upstream.Timeout)
			t.TLSClientConfig = files.Upstream(serverName, roots)
			return t
		}
		if files.UpstreamCAs() == nil {
			return mk(nil)
		}
		return newRotatingTransport(files.UpstreamCAs, mk)
	}
	global := build(cfg.Upstream.TLS.ServerName)
	if cfg.Upstream.TLS.ServerName == "" {
		return global
	}
	return &byHost{host: cfg.Upstream.URL.Host, global: global, others: build("")}
}

// rotatingTransport sends requests through an http.Transport that trusts
// the current CA pool: when roots returns another pool (the CA file changed
// and loaded), new requests go through a transport built for it, so every
// connection from then on is verified by the standard library against the
// new bundle, hostname and server name included, and the old transport's
// idle connections are closed. Requests already on the old one finish there.
type rotatingTransport struct {
	roots func() *x509.CertPool
	build func(*x509.CertPool) *http.Transport

	mu  sync.Mutex
	cur atomic.Pointer[poolTransport]
}

type poolTransport struct {
	pool *x509.CertPool
	t    *http.Transport
}

func newRotatingTransport(roots func() *x509.CertPool, build func(*x509.CertPool) *http.Transport) *rotatingTransport {
	r := &rotatingTransport{roots: roots, build: build}
	pool := roots()
	r.cur.Store(&poolTransport{pool: pool, t: build(pool)})
	return r
}

// RoundTrip implements http.RoundTripper.
func (r *rotatingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	pool := r.roots()
	cur := r.cur.Load()
	if cur.pool != pool {
		r.mu.Lock()
		if cur = r.cur.Load(); cur.pool != pool {
			old := cur
			cur = &poolTransport{pool: pool, t: r.build(pool)}
			r.cur.Store(cur)
			old.t.CloseIdleConnections()
		}
		r.mu.Unlock()
	}
	return cur.t.RoundTrip(req)
}

// CloseIdleConnections closes the current transport's idle connections.
func (r *rotatingTransport) CloseIdleConnections() {
	r.cur.Load().t.CloseIdleConnections()
}
