package caddyidem

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"

	"github.com/caddyserver/caddy/v2"

	"github.com/idemgate/idemgate/proxy"
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
// Both take a connection for it after it was written (a request with a
// body even in part: wroteRequest) and before a response came (an
// answer that broke off mid-header is none): the guard closes that
// connection as the transport hands it over (GotConn comes before the
// request is written to it), so the second send fails without a byte, the call ends in an error after a
// connection, and the outcome is unknown (the claim kept) instead of run
// twice. A connection taken after a response came (a handle_response
// route's own reverse_proxy) is left alone. An HTTP/2 connection carries
// other requests' streams, so it is never closed: the guard cancels the
// call's context instead, which its transport checks before it writes a
// stream's header (encodeAndWriteHeaders), as reverse_proxy retries a
// request that went over HTTP/2 all the same
// (TestCaddyRetryAfterSendNeverRunsTwice/h2c). reverse_proxy answers a
// cancelled call 499 with no error, so callNext asks cut and makes the
// call an unknown outcome itself. That also cuts the HTTP/2 transport's
// own re-send of a stream written in full that the upstream then refused
// (REFUSED_STREAM, GOAWAY): an unknown outcome, never a second run.
type sendGuard struct {
	mu sync.Mutex
	// http1 says the request written last went over HTTP/1 (its Host
	// field is reported under that name; HTTP/2 reports :authority).
	http1 bool
	// unanswered says a request was written (wroteRequest) and no
	// answer has begun, or only an interim one (got1xx).
	unanswered bool
	// answering says an answer began to the request being sent before
	// it was written in full (an upstream may answer early, and HTTP/2
	// is full duplex): its end does not leave it unanswered.
	answering bool
	// wrote says the request being sent was written (wroteRequest).
	wrote bool
	// body says the request has a body (a length other than 0).
	body bool
	// cancel ends the context of the call's requests to upstreams;
	// cancelled says it did.
	cancel    context.CancelFunc
	cancelled bool
	// answer reports whether an upstream answered during the call, and
	// whether the last answer says nothing of whether it acted (a status
	// the route lists in unknown_statuses): a send after such an answer
	// is a second one, cut as after a request left unanswered.
	answer func() (answered, unknown bool)
	// forget clears what answer reads as a send begins, so that it tells
	// of that send's answer alone.
	forget func()
	// dialed says a connection was made by a dial (ConnectDone), and
	// traced that a transport reported one (GotConn): a transport that
	// dials without reporting its connections (FastCGI's) is guarded by
	// its dials (connectStart).
	dialed, traced bool
}

// cut reports whether the guard cancelled the call's context to stop a
// second send over HTTP/2.
func (g *sendGuard) cut() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cancelled
}

func (g *sendGuard) wroteHeaderField(name string, _ []string) {
	if name == "Host" {
		g.mu.Lock()
		g.http1 = true
		g.mu.Unlock()
	}
}

// wroteRequest marks a request written. A bodiless one whose write
// failed is not marked: net/http re-sends it only when no byte of it left
// (a reused connection the upstream had closed before the write), which
// is safe. One with a body is marked even when its write failed: the
// upstream may have acted on what it read (its header, part of the body)
// before it died or reset the stream, and reverse_proxy retries it
// (lb_retry_match) however much left (TestCaddyRetryAfterSendNeverRunsTwice/h2c,
// whose upstream acts without reading the body).
func (g *sendGuard) wroteRequest(info httptrace.WroteRequestInfo) {
	if info.Err != nil && !g.body {
		return
	}
	g.mu.Lock()
	g.wrote, g.unanswered = true, !g.answering
	g.mu.Unlock()
}

func (g *sendGuard) answered() {
	g.mu.Lock()
	g.unanswered, g.answering = false, true
	g.mu.Unlock()
}

// got1xx takes back what answered made of an interim response's first
// byte: a 100 Continue (net/http's transport reports the first byte of
// whatever comes first, and an upstream sends 100 Continue to a request
// with Expect: 100-continue, which reverse_proxy passes on, as curl sends
// with any body over 1 KiB), 102 or 103 is no answer, and an upstream
// that dies after it may have acted
// (TestCaddyRetryAfterSendNeverRunsTwice/http1_100-continue). No trace
// hook reports the final response that follows, so a handle_response
// route's own reverse_proxy after an interim response is cut too: an
// unknown outcome rather than a second run.
func (g *sendGuard) got1xx(code int, _ textproto.MIMEHeader) error {
	if code == http.StatusSwitchingProtocols {
		return nil
	}
	g.mu.Lock()
	g.answering, g.unanswered = false, g.wrote
	g.mu.Unlock()
	return nil
}

// gotConn stops conn from carrying again a request that was written and
// not answered, or answered with a status of unknown outcome (Caddy's
// reverse_proxy retries on the upstream's status when lb_retry_match
// says so: TestCaddyRetryAfterUnknownStatusNeverRunsTwice): it closes it
// after HTTP/1, and cancels the call's context after HTTP/2 (sendGuard
// says why).
func (g *sendGuard) gotConn(conn net.Conn) {
	answered, unknown := g.answer()
	g.mu.Lock()
	g.traced = true
	// An answer that began and never became a response (the upstream
	// acted and died in the middle of its header) is no answer: the
	// status placeholder is set only once reverse_proxy has the response,
	// and forgotten as each send begins
	// (TestCaddyRetryAfterSendNeverRunsTwice/http1_mid-header).
	resend, http1 := g.unanswered || unknown || (g.answering && !answered), g.http1
	g.answering, g.wrote = false, false
	g.cancelled = g.cancelled || (resend && !http1)
	g.mu.Unlock()
	switch {
	case !resend:
		g.forget()
	case http1:
		if conn != nil {
			_ = conn.Close()
		}
	default:
		g.cancel()
	}
}

// connectDone marks a connection made by a dial of the call (net.Dialer
// reports it through the request's trace whoever dials: net/http's
// transport and FastCGI's alike).
func (g *sendGuard) connectDone(network, _ string, err error) {
	if err != nil || !streamDial(network) {
		return
	}
	g.mu.Lock()
	g.dialed = true
	g.mu.Unlock()
}

// connected reports whether any upstream got a connection during the
// call, reported by its transport or seen in a dial: reverse_proxy
// returns its last error only, and a dial failure last does not prove
// that nothing was sent before it (neverSent).
func (g *sendGuard) connected() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.traced || g.dialed
}

// streamDial reports whether a dial on network may carry a request to an
// upstream. The resolver's dials for a lookup made under the request's
// context (reverse_proxy's dynamic upstreams) are reported too, over UDP:
// they are none (net.Dialer hides its own lookups' dials already).
func streamDial(network string) bool {
	return strings.HasPrefix(network, "tcp") || strings.HasPrefix(network, "unix")
}

// connectStart cuts a dial for a second send by a transport that reports
// no connection (FastCGI's: no GotConn, no WroteRequest, no first
// response byte): after a connection of the call was made and no upstream
// answered, or answered with a status of unknown outcome, a new dial is
// a retry of a request an upstream may have acted on (lb_retry_match
// after a php-fpm that died mid-call), so the call's context is cancelled
// before it connects, as for HTTP/2 in gotConn
// (TestCaddyFastCGIDialFailureAfterAnUpstreamActedKeepsTheClaim). A dial
// that follows an answer (a handle_response route's own reverse_proxy) is
// left alone. net/http's transport reports its connections, and gotConn
// guards them.
func (g *sendGuard) connectStart(network, _ string) {
	if !streamDial(network) {
		return
	}
	answered, unknown := g.answer()
	g.mu.Lock()
	cut := g.dialed && !g.traced && (!answered || unknown)
	untraced := !g.traced
	g.cancelled = g.cancelled || cut
	g.mu.Unlock()
	switch {
	case cut:
		g.cancel()
	case untraced:
		// gotConn, which forgets the last answer for net/http's sends,
		// may not follow: forgotten here (a send of net/http's that
		// follows has no answer of its own before it either).
		g.forget()
	}
}

// lastAnswer reports whether reverse_proxy got an answer from an upstream
// during r's call, and whether the last one has a status the route lists
// in unknown_statuses (proxy.UnknownStatus): reverse_proxy sets its status
// placeholder once it has a response, before it decides on a retry by
// the response (lb_retry_match) or hands it to a handle_response route.
func lastAnswer(r *http.Request) (answered, unknown bool) {
	repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return false, false
	}
	code, ok := repl.Get("http.reverse_proxy.status_code")
	status, isInt := code.(int)
	return ok, isInt && proxy.UnknownStatus(r, status)
}

// forgetAnswer clears reverse_proxy's status placeholder of r's call as a
// send to an upstream begins, so that lastAnswer tells of that send's
// answer, not of an earlier one's: reverse_proxy sets it again once it
// has the response, and clears the header placeholders of an earlier
// attempt itself.
func forgetAnswer(r *http.Request) {
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		repl.Delete("http.reverse_proxy.status_code")
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

// errSecondSendCut is the cause of an unknown outcome whose second send
// to an upstream the guard cut by cancelling the call's context.
var errSecondSendCut = errors.New("a second send of the request to an upstream was cut")
