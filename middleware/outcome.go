package middleware

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"

	"github.com/idemgate/idemgate/proxy"
)

// NothingDone tells the engine that the handler serving r did nothing the
// request asked for (it refused it before acting): the key is released
// whatever the handler writes, its answer is sent as written and not
// stored, and a retry runs the handler again. Without it a handler that
// panics keeps its claim until the lease ends (a panic says nothing of
// what ran before it); with it, a panic that follows releases the claim.
// Writing a status the route does not store (a 4xx, a 5xx) before acting
// releases the key too. It reports whether r is a keyed call the engine
// runs under a claim (see proxy.NothingDone); OutcomeUnknown on the same
// call wins over it.
func NothingDone(r *http.Request) bool { return proxy.NothingDone(r) }

// Unreachable tells the engine that the handler serving r could not
// reach the backend it hands the request to and sent it nothing (the
// connection could not be made): the key is released, as by NothingDone,
// and the client gets what the standalone proxy answers for an upstream
// it could not reach, 502 upstream-unreachable as RFC 9457 problem
// details, whatever the handler writes. cause (nil is allowed) is logged.
// OutcomeUnknown on the same call wins over it. It reports whether r is a
// keyed call the engine runs under a claim (see proxy.Unreachable).
func Unreachable(r *http.Request, cause error) bool { return proxy.Unreachable(r, cause) }

// OutcomeUnknown tells the engine that the handler serving r may have
// acted and does not know the result (a backend it called took the
// request and failed before answering): nothing is stored whatever the
// handler writes, the claim is kept until its lease ends and then the
// route's on_abandoned decides, and the client gets what the standalone
// proxy answers for an upstream that failed after the request was sent:
// 502 upstream-failed, or 504 upstream-timeout when cause is a timeout. A
// retry is never run while the outcome is unknown. cause (nil is allowed)
// is logged. It reports whether r is a keyed call the engine runs under a
// claim (see proxy.OutcomeUnknown).
func OutcomeUnknown(r *http.Request, cause error) bool { return proxy.OutcomeUnknown(r, cause) }

// Captured reports whether w, the writer the handler serving a request
// was given, is the engine's capture of a call it decides on (or wraps
// it): what the handler writes is then decided on when it returns, never
// sent as written, and writing nothing is an implicit 200 that a
// replayable route stores. A handler that may fail without writing (a
// Caddy handler returns an error instead) answers the failure itself when
// Captured says so, and hands it back to its host otherwise (see
// proxy.Captured).
func Captured(w http.ResponseWriter) bool { return proxy.Captured(w) }

// ReverseProxyErrorHandler returns an ErrorHandler for
// httputil.ReverseProxy used as a handler behind the middleware. A failure
// that provably never reached the backend (the connection could not be
// made: a *net.OpError whose Op is "dial", such as connection refused)
// releases the key (Unreachable: the client gets 502 upstream-unreachable,
// as from the standalone proxy) and the retry runs once the backend is
// back, unless a request made under r's context reached a backend earlier
// in the call (the handler's own call to a service before it hands the
// request on: proxy.Reached), which may have acted; every other failure
// (a connection reset or closed after the request was written, a
// response header timeout, a TLS failure, a
// cancelled context) may come after the backend acted, so its outcome is
// unknown (OutcomeUnknown): the claim is kept and the retry is never sent
// on, as the standalone proxy does in front of the same backend. Either
// way it answers 502 Bad Gateway, as ReverseProxy's default handler does,
// which the engine replaces with its own answer in a keyed call. log
// receives one warning per failure; nil discards them.
func ReverseProxyErrorHandler(log *slog.Logger) func(http.ResponseWriter, *http.Request, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(w http.ResponseWriter, r *http.Request, err error) {
		if neverSent(err) && !proxy.Reached(r) {
			Unreachable(r, err)
			log.Warn("reverse proxy: the backend could not be reached; the request was not sent", "err", err)
		} else {
			OutcomeUnknown(r, err)
			log.Warn("reverse proxy: the backend exchange failed after the request may have been sent; outcome unknown", "err", err)
		}
		w.WriteHeader(http.StatusBadGateway)
	}
}

// ReverseProxyTransport returns the Transport for httputil.ReverseProxy
// used as a handler behind the middleware: base (http.DefaultTransport
// when nil), except that a request carrying Idempotency-Key or
// X-Idempotency-Key without a body goes out with an empty body of its own
// (sent chunked, as the standalone proxy sends it) instead of none.
// ReverseProxy gives the transport a nil body for a request of length 0,
// and net/http's transport re-sends a request with a nil body and one of
// those fields on a new connection when a reused one breaks before the
// answer, after the backend may have acted (Request.isReplayable): a
// second run that the engine never sees
// (TestReverseProxyEmptyBodyNotResentOnReusedConnection). A keyed request
// whose body net/http could send again (GetBody, set by a Rewrite that
// read it) goes out without GetBody, for the same reason. With a body that
// cannot be sent again, the failure reaches the ErrorHandler instead.
func ReverseProxyTransport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return noResend{base: base}
}

// noResend is ReverseProxyTransport's RoundTripper.
type noResend struct{ base http.RoundTripper }

// RoundTrip sends r through base, with a body of its own when r has none
// and carries a key field, and without GetBody when its body has one (a
// Rewrite that read the body to sign it): net/http re-sends a keyed
// request whose body it can rewind as it does one without a body
// (TestReverseProxyRewindableBodyNotResentOnReusedConnection). A shallow
// copy: a RoundTripper must not modify its request.
func (t noResend) RoundTrip(r *http.Request) (*http.Response, error) {
	_, key := r.Header["Idempotency-Key"]
	_, xkey := r.Header["X-Idempotency-Key"]
	if !key && !xkey {
		return t.base.RoundTrip(r)
	}
	switch {
	case r.Body == nil || r.Body == http.NoBody:
		out := r.WithContext(r.Context())
		out.Body, out.GetBody = emptyBody{}, nil
		return t.base.RoundTrip(out)
	case r.GetBody != nil:
		out := r.WithContext(r.Context())
		out.GetBody = nil
		return t.base.RoundTrip(out)
	}
	return t.base.RoundTrip(r)
}

// emptyBody is a body without bytes that net/http cannot send again (it
// is neither nil nor http.NoBody, and no GetBody goes with it).
type emptyBody struct{}

func (emptyBody) Read([]byte) (int, error) { return 0, io.EOF }
func (emptyBody) Close() error             { return nil }

// neverSent reports whether err, a failed round trip's, proves that no
// byte of the request reached the backend: the connection to it was never
// made. A failure on a connection that was made (even one the backend had
// closed before the request was written: net/http does not say which) is
// not proof.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
