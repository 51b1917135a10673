package proxy

import (
	"net/http"

	"github.com/idemgate/idemgate/problem"
)

// fail answers with pr, a problem of the catalog (problem.Kind.With), and
// sets the request's outcome to that of pr's kind, under which ServeHTTP's
// completion (done) logs and counts it: the pair is defined once, in the
// catalog. A gRPC call gets it as a gRPC status (answerProblem).
func (p *Proxy) fail(w http.ResponseWriter, ex *exchange, pr problem.Details) {
	p.answerProblem(w, ex.r, ex, pr)
	ex.outcome, ex.status = pr.Outcome, pr.Status
}

// writeProblem answers with pr in the shape of ex's route (its
// problems.template, content_type and headers; RFC 9457 without them). A
// template that fails on pr leaves an RFC 9457 answer and a warning.
func (p *Proxy) writeProblem(w http.ResponseWriter, ex *exchange, pr problem.Details) {
	var f *problem.Format
	if ex != nil {
		pr.RequestID = ex.requestID
		if ex.route != nil {
			f = ex.route.Problems
		}
	}
	if f == nil {
		p.problems.Write(w, pr)
		return
	}
	if err := p.problems.WriteFormat(w, pr, f); err != nil {
		p.log.Warn("problem template failed; answered RFC 9457 instead", "route", ex.route.Name, "problem", pr.Type, "err", err)
	}
}

// withRetry returns pr with a Retry-After of seconds.
func withRetry(pr problem.Details, seconds int) problem.Details {
	pr.RetryAfter = seconds
	return pr
}
