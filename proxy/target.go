package proxy

import (
	"net/http"
	"slices"

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
//     came. The whole preface on a listener without h2c is answered in
//     HTTP/2, a GOAWAY that says to enable it (goAwayPreface); anything
//     else with method PRI (or a connection that cannot be taken over) gets
//     505 with Connection: close: what follows the preface on the
//     connection is HTTP/2 frames, not a next request.
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
		if !p.h2c && isPreface(r) && p.goAwayPreface(w) {
			ex.outcome, ex.status = problem.HTTP2Preface.Outcome, problem.HTTP2Preface.Status
			return true
		}
		detail := "method PRI is the HTTP/2 connection preface, which this listener does not serve: HTTP/2 without TLS (prior knowledge, h2c) is off (server.h2c); send HTTP/1.1, or HTTP/2 over TLS"
		if p.h2c {
			detail = "method PRI is the HTTP/2 connection preface; it reached idemgate as an HTTP/1.1 request because it was incomplete: an HTTP/2 client without TLS starts with the whole preface (RFC 9113 section 3.4)"
		}
		// net/http's HTTP/1 server closes the connection after the
		// answer; its HTTP/2 server turns the field into a GOAWAY.
		w.Header().Set("Connection", "close")
		p.fail(w, ex, problem.HTTP2Preface.With(detail))
		return true
	case r.RequestURI == "*":
		p.fail(w, ex, problem.AsteriskTarget.With(
			"the request target * names the server itself and is only valid with OPTIONS (RFC 9112 section 3.2.4); "+r.Method+" needs a path, and * is never forwarded"))
		return true
	}
	return false
}

// requestTrailers returns the names of the trailer fields a request
// carries, sorted, or nil: a keyed request on an enforced route with
// trailers is refused with 400 request-trailers (verdictOf). It is asked
// before the body is read, for the trailers announced in a Trailer field
// (net/http lists their names in Trailer, a map every shallow copy of the
// request shares, so the upload is not wasted), and after, for trailers
// that followed a chunked body. Those net/http adds to in, the request its
// server read (ServeHTTP's own argument, unless a wrapper such as the
// tracing handler passed a copy), and to r's map when they were announced.
// Unannounced trailers that no copy shows are never forwarded either: the
// outbound request is built from r, whose Trailer is then empty (net/http's
// HTTP/2 server drops unannounced ones too).
//
// Trailers are not in the fingerprint, and refusing them is chosen over
// adding them to it: a recipient may discard trailers (RFC 9110 section
// 6.5.1), and net/http's HTTP/2 server does for unannounced ones, so a
// retry that took another path could arrive with other trailers than its
// first attempt and be refused as a different request; an upstream may act
// on them (a checksum, a signature), so a keyed request must not reach it
// with fields its retry is not compared on; and the fingerprint, the
// recipe and every stored record stay as they are, so replicas of earlier
// builds in a rolling update agree. A client moves such fields into
// headers, which fingerprint.headers can cover. docs/protocol.md,
// "Fingerprint recipes", says so.
func requestTrailers(r, in *http.Request) []string {
	if len(r.Trailer) == 0 && len(in.Trailer) == 0 {
		return nil
	}
	var names []string
	for _, t := range []http.Header{r.Trailer, in.Trailer} {
		for name := range t {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}
