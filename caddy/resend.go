package caddyidem

import (
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
)

// What keeps the handlers after the module from sending a keyed request
// to an upstream a second time during one call (callNext): the engine's
// claim covers one call, and a second send inside it would run the
// operation twice with nothing to show for it.

// sendGuard keeps a request that an upstream may have acted on from being
// sent a second time during one call of the handlers after the module,
// whoever sends it again. net/http's transport re-sends a request with a
// nil body and an Idempotency-Key field on a new connection when a reused
// one broke before the answer (Request.isReplayable), and hideKeyFields
// cannot hide the field from it when reverse_proxy builds the outgoing
// header again with Header.Add, which gives each name its canonical form
// back: with any header_up, and for an https upstream, whose transport
// sets Host (TestCaddyEmptyBodyNotResentOnReusedConnection/header_up).
// reverse_proxy sends it again too when lb_retry_match allows a retry
// after the request was written (TestCaddyRetryAfterSendNeverRunsTwice).
// Both take a connection for it after it was written in full and before
// any answer began: the guard closes that connection as the transport
// hands it over (GotConn comes before the request is written to it), so
// the second send fails without a byte, the call ends in an error after a
// connection, and the outcome is unknown (the claim kept) instead of run
// twice. A connection taken after an answer began (a handle_response
// route's own reverse_proxy) is left alone, as are HTTP/2 ones, which
// carry other requests' streams, and whose transport re-sends only what
// the upstream said it did not process (REFUSED_STREAM, GOAWAY).
type sendGuard struct {
	mu sync.Mutex
	// http1 says the request written last went over HTTP/1 (its Host
	// field is reported under that name; HTTP/2 reports :authority).
	http1 bool
	// unanswered says a request was written in full and no answer has
	// begun.
	unanswered bool
}

func (g *sendGuard) wroteHeaderField(name string, _ []string) {
	if name == "Host" {
		g.mu.Lock()
		g.http1 = true
		g.mu.Unlock()
	}
}

// wroteRequest marks a request written in full. One whose write failed
// is not marked: net/http re-sends a bodiless one only when no byte of it
// left (a reused connection the upstream had closed before the write),
// which is safe, and sends no other again.
func (g *sendGuard) wroteRequest(info httptrace.WroteRequestInfo) {
	if info.Err != nil {
		return
	}
	g.mu.Lock()
	g.unanswered = true
	g.mu.Unlock()
}

func (g *sendGuard) answered() {
	g.mu.Lock()
	g.unanswered, g.http1 = false, false
	g.mu.Unlock()
}

// gotConn closes conn when it is about to carry again an HTTP/1 request
// that was written and not answered.
func (g *sendGuard) gotConn(conn net.Conn) {
	g.mu.Lock()
	resend := g.unanswered && g.http1
	g.mu.Unlock()
	if resend && conn != nil {
		_ = conn.Close()
	}
}

// hideKeyFields keeps net/http's transport from sending a keyed request
// without a body a second time by itself. reverse_proxy hands its
// transport a nil body for a request of length 0, and net/http re-sends a
// request with a nil body and an Idempotency-Key or X-Idempotency-Key
// field (looked up by its canonical name) on a new connection when a
// reused one breaks before the answer, after the upstream may have acted
// (TestCaddyEmptyBodyNotResentOnReusedConnection). The fields move to
// their lowercase names in h, the header of the engine's own copy of the
// request: the upstream gets them as sent (field names are
// case-insensitive on the wire), and a handler after the module that
// looks them up by name (a placeholder, a matcher, header_up) no longer
// finds them on a bodiless keyed request. The length cannot be made
// unknown instead: php_fastcgi refuses a body of unknown length (411).
func hideKeyFields(h http.Header) {
	for _, name := range [...]string{"Idempotency-Key", "X-Idempotency-Key"} {
		if v, ok := h[name]; ok {
			delete(h, name)
			h[strings.ToLower(name)] = v
		}
	}
}
