package proxy

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
)

// RequestIDHeader carries the request id (the de-facto X-Request-Id that
// nginx's $request_id, Heroku and most load balancers use): a client's or
// an outer proxy's value is kept; a request without one (or with one that
// is not a single short token) gets one from idemgate. The upstream
// receives it, the access line logs it, and every problem answer carries it
// as the extension member request_id.
const RequestIDHeader = "X-Request-Id"

// maxRequestIDBytes bounds an accepted X-Request-Id: long enough for any
// UUID, ULID or trace id with a prefix, short enough that a client cannot
// fill the access log through it.
const maxRequestIDBytes = 128

// requestIDs makes this process's request ids: a random prefix per process
// (so ids of replicas never collide) and a counter, e.g.
// "3f9a61c0d2b47e85-1b". Cheaper than a random value per request: one
// string allocation.
type requestIDs struct {
	prefix string
	n      atomic.Uint64
}

func newRequestIDs() *requestIDs {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return &requestIDs{prefix: hex.EncodeToString(b[:]) + "-"}
}

// of returns r's request id, and gives r one when it has none that can be
// kept: the outgoing request is built from r's header, so the upstream
// receives the same value. slot holds the header field's value (the
// caller's storage: one allocation less per request than a slice of its
// own).
func (ids *requestIDs) of(r *http.Request, slot *[1]string) string {
	if vs := r.Header[RequestIDHeader]; len(vs) == 1 && validRequestID(vs[0]) {
		return vs[0]
	}
	var buf [48]byte
	b := append(buf[:0], ids.prefix...)
	b = strconv.AppendUint(b, ids.n.Add(1), 36)
	slot[0] = string(b)
	r.Header[RequestIDHeader] = slot[:]
	return slot[0]
}

// validRequestID reports whether v is a single token of visible ASCII of
// at most maxRequestIDBytes: nothing that could split a log line or a
// header.
func validRequestID(v string) bool {
	if v == "" || len(v) > maxRequestIDBytes {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] > '~' {
			return false
		}
	}
	return true
}

// clientAddr is the client's address for the access line: the peer's, or
// behind a trusted proxy (server.trusted_proxies) the one its
// X-Forwarded-For chain names, as the upstream's X-Real-IP gets it.
func (p *Proxy) clientAddr(r *http.Request) string {
	// The peer is parsed only when some proxy is trusted: no address is
	// trusted otherwise, and the parse showed in every replay's profile.
	if len(p.trusted) > 0 {
		if peer := peerAddr(r.RemoteAddr); isTrusted(peer, p.trusted) {
			return realIP(r.Header.Values("X-Forwarded-For"), peer, r.RemoteAddr, p.trusted)
		}
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}
