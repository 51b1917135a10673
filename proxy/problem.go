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
	p.problems.Write(w, pr)
	ex.outcome, ex.status = pr.Outcome, pr.Status
	p.done(r, ex)
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
