package proxy

import (
	"net/http"

	"github.com/idemgate/idemgate/problem"
)

// refuseForm answers a request that no upstream may get, whatever route
// governs it, and reports whether it did:
//
//   - method PRI: the HTTP/2 connection preface (RFC 9113 section 3.4),
//     which net/http reads as the request "PRI * HTTP/2.0" when it does not
//     serve HTTP/2 without TLS on the listener (server.h2c off), or when
//     the preface is cut short. Forwarded, it became "PRI /*" and ran the
//     upstream's handler, and the HTTP/2 client waited for frames that never
//     came. The answer is 505 with Connection: close: what follows the
//     preface on the connection is HTTP/2 frames, not a next request.
//   - a request target in asterisk form ("*", RFC 9112 section 3.2.4) with
//     any method but OPTIONS: the form names the server itself, never a
//     resource, and only OPTIONS may use it; forwarded, it became the path
//     "/*". OPTIONS * does not get here: net/http answers it itself (its
//     server-wide OPTIONS handler, 200 with no body), so it is never
//     forwarded either.
//
// Neither check allocates for an ordinary request.
func (p *Proxy) refuseForm(w http.ResponseWriter, r *http.Request, ex *exchange) bool {
	switch {
	case r.Method == "PRI":
		detail := "method PRI is the HTTP/2 connection preface, which this listener does not serve: HTTP/2 without TLS (prior knowledge, h2c) is off (server.h2c); send HTTP/1.1, or HTTP/2 over TLS"
		if p.h2c {
			detail = "method PRI is the HTTP/2 connection preface; it reached idemgate as an HTTP/1.1 request because it was incomplete: an HTTP/2 client without TLS starts with the whole preface (RFC 9113 section 3.4)"
		}
		// net/http's HTTP/1 server closes the connection after the
		// answer; its HTTP/2 server turns the field into a GOAWAY.
		w.Header().Set("Connection", "close")
		p.fail(w, r, ex, problem.HTTP2Preface.With(detail))
		return true
	case r.RequestURI == "*":
		p.fail(w, r, ex, problem.AsteriskTarget.With(
			"the request target * names the server itself and is only valid with OPTIONS (RFC 9112 section 3.2.4); "+r.Method+" needs a path, and * is never forwarded"))
		return true
	}
	return false
}
