package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"

	"github.com/idemgate/idemgate/problem"
)

// fail answers with pr, a problem of the catalog (problem.Kind.With), and
// logs the request under the outcome of pr's kind: the pair is defined once,
// in the catalog.
func (p *Proxy) fail(w http.ResponseWriter, r *http.Request, ex *exchange, pr problem.Details) {
	p.answerProblem(w, r, ex, pr)
	ex.outcome, ex.status = pr.Outcome, pr.Status
	p.done(r, ex)
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

// LogDigest is what every idemgate log line shows instead of an idempotency
// key or an owner: the first 12 hex digits (48 bits) of the value's SHA-256,
// enough to correlate the lines of one operation, in the proxy's and the
// admin listener's logs alike, without writing the value itself. README.md
// documents the format.
func LogDigest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:6])
}
