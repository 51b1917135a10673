package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"

	"github.com/idemgate/idemgate/policy"
)

// ErrProtocolMismatch is wrapped by the error of an exchange with an h2c
// upstream whose first bytes were not the HTTP/2 server connection
// preface (a SETTINGS frame first, RFC 9113 section 3.4): it does not
// speak HTTP/2 on that port (an HTTP/1.1 server answered "HTTP/1.1 400").
// Such a server took the client preface for a bad request and processed
// no stream, so nothing was sent as far as the upstream is concerned:
// forward releases the key and answers upstream-unreachable. An upstream
// that sent nothing at all (slow to send its SETTINGS, hung, or closed the
// connection after reading) is not a mismatch: it read the request and
// may have acted, so the outcome is unknown
// (TestH2CSilentServerKeepsTheClaim).
var ErrProtocolMismatch = errors.New("the upstream did not answer in HTTP/2 (no server connection preface), so the request was not processed")

// registerH2C makes t send requests to h2c:// URLs (policy.SchemeH2C)
// over a transport of its own that speaks only HTTP/2 without TLS
// (http.Protocols with SetUnencryptedHTTP2), never HTTP/1.1, with t's
// dialer, idle connection limits and response header timeout.
func registerH2C(t *http.Transport) {
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h := &http.Transport{
		Protocols: &protos,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &sniffConn{Conn: c}, nil
		},
		DisableCompression:    t.DisableCompression,
		MaxIdleConnsPerHost:   t.MaxIdleConnsPerHost,
		IdleConnTimeout:       t.IdleConnTimeout,
		ResponseHeaderTimeout: t.ResponseHeaderTimeout,
	}
	t.RegisterProtocol(policy.SchemeH2C, &h2cTransport{t: h})
}

// h2cTransport sends an h2c:// request as http:// over t, and marks the
// error of an exchange whose upstream did not speak HTTP/2 with
// ErrProtocolMismatch.
type h2cTransport struct{ t *http.Transport }

// RoundTrip implements http.RoundTripper.
func (h *h2cTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var mu sync.Mutex
	var conn net.Conn
	ctx := httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			mu.Lock()
			conn = i.Conn
			mu.Unlock()
		},
	})
	out := req.WithContext(ctx)
	u := *req.URL
	u.Scheme = "http"
	out.URL = &u
	resp, err := h.t.RoundTrip(out)
	if err != nil {
		mu.Lock()
		sc, ok := conn.(*sniffConn)
		mu.Unlock()
		if ok && sc.answeredOtherwise() {
			return nil, fmt.Errorf("%w: %w", ErrProtocolMismatch, err)
		}
		return nil, err
	}
	return resp, nil
}

// CloseIdleConnections closes the h2c transport's idle connections.
func (h *h2cTransport) CloseIdleConnections() { h.t.CloseIdleConnections() }

// sniffConn keeps the first frame header (9 bytes) the upstream sent on a
// connection, to tell an HTTP/2 server from one that is not.
type sniffConn struct {
	net.Conn
	mu   sync.Mutex
	head [9]byte
	n    int
}

// Read implements net.Conn.
func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		if c.n < len(c.head) {
			c.n += copy(c.head[c.n:], p[:n])
		}
		c.mu.Unlock()
	}
	return n, err
}

// answeredOtherwise reports whether the upstream sent bytes that cannot
// begin its connection preface, a SETTINGS frame (type 0x4) without ACK on
// stream 0. Silence is not such an answer: an HTTP/2 server may read and
// act on a request before its SETTINGS reach us.
func (c *sniffConn) answeredOtherwise() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.head[:c.n]
	switch {
	case len(h) > 3 && h[3] != 0x4:
		return true
	case len(h) > 4 && h[4]&0x1 != 0:
		return true
	case len(h) > 5 && h[5]&0x7f != 0:
		return true
	}
	for _, b := range h[min(len(h), 6):] {
		if b != 0 {
			return true
		}
	}
	return false
}

// notSent reports whether err, a failed upstream exchange, surely sent
// nothing the upstream could act on even though a connection was made.
func notSent(err error) bool { return errors.Is(err, ErrProtocolMismatch) }
