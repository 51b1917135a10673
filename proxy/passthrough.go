package proxy

import (
	"context"
	"errors"
	"net/http"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/problem"
)

// passthroughServe proxies a request that is not enforced, untouched and
// streamed, through httputil.ReverseProxy.
func (p *Proxy) passthroughServe(w http.ResponseWriter, r *http.Request, ex *exchange) {
	ex.outcome = metrics.OutcomePassthrough
	// Deferred: ReverseProxy aborts the handler with http.ErrAbortHandler
	// when the client leaves mid-stream, and the request still counts.
	defer p.done(r, ex)
	p.passthrough.ServeHTTP(w, r)
}

// passthroughError is the passthrough ReverseProxy's ErrorHandler: the
// request was not enforced, so nothing is claimed or released; the client
// gets a problem (or, when it left, nothing).
func (p *Proxy) passthroughError(w http.ResponseWriter, r *http.Request, err error) {
	p.log.Warn("passthrough upstream exchange failed", "method", r.Method, "path", r.URL.Path, "err", err)
	if ex := exchangeOf(r.Context()); ex != nil {
		ex.cause = err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		p.problems.Write(w, problem.UpstreamTimeout.With("the upstream did not answer in time"))
		return
	}
	if errors.Is(err, context.Canceled) {
		w.WriteHeader(499) // client went away; nobody reads this
		return
	}
	p.problems.Write(w, problem.UpstreamUnreachable.With("the upstream exchange failed"))
}
