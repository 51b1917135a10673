package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ProblemBase is the prefix of every problem type URI idemgate produces; the
// suffix names the case and never changes once released.
const ProblemBase = "https://idemgate.dev/problems/"

// Problem is an RFC 9457 problem details object, the body of every error
// response idemgate itself produces (media type application/problem+json).
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// RetryAfter, in whole seconds, is sent as the Retry-After field when > 0
	// (RFC 9110 section 10.2.3); it is not part of the JSON body.
	RetryAfter int `json:"-"`
}

// problemKind is one documented case: its type suffix, status and title.
type problemKind struct {
	slug   string
	status int
	title  string
}

// The problem cases; README.md lists them with their meaning.
var (
	probInvalidKey        = problemKind{"invalid-key", http.StatusBadRequest, "Invalid idempotency key"}
	probMissingKey        = problemKind{"missing-key", http.StatusBadRequest, "Idempotency key required"}
	probMissingOwner      = problemKind{"missing-owner", http.StatusBadRequest, "Request owner missing"}
	probBadRequest        = problemKind{"bad-request", http.StatusBadRequest, "Request body could not be read"}
	probAmbiguous         = problemKind{"ambiguous-request", http.StatusBadRequest, "Request form is ambiguous"}
	probTooLarge          = problemKind{"request-too-large", http.StatusRequestEntityTooLarge, "Request body too large"}
	probMismatch          = problemKind{"key-reused", http.StatusUnprocessableEntity, "Idempotency key reused for a different request"}
	probInProgress        = problemKind{"request-in-progress", http.StatusConflict, "A request with this idempotency key is still in progress"}
	probNotRetained       = problemKind{"response-not-retained", http.StatusConflict, "The original response was not retained"}
	probOutcomeUnknown    = problemKind{"outcome-unknown", http.StatusConflict, "The outcome of the original request is unknown"}
	probStoreUnavailable  = problemKind{"store-unavailable", http.StatusServiceUnavailable, "Idempotency store unavailable"}
	probUpstreamUnreached = problemKind{"upstream-unreachable", http.StatusBadGateway, "Upstream unreachable"}
	probUpstreamFailed    = problemKind{"upstream-failed", http.StatusBadGateway, "Upstream exchange failed; outcome unknown"}
	probUpstreamTimeout   = problemKind{"upstream-timeout", http.StatusGatewayTimeout, "Upstream timed out; outcome unknown"}
)

func (k problemKind) with(detail string) Problem {
	return Problem{Type: ProblemBase + k.slug, Title: k.title, Status: k.status, Detail: detail}
}

// writeProblem writes p as application/problem+json. The body is built
// without user-controlled HTML so it is safe to show anywhere.
func writeProblem(w http.ResponseWriter, p Problem) {
	body, err := json.Marshal(p)
	if err != nil { // cannot happen for these field types
		body = []byte(`{"title":"internal error","status":500}`)
		p.Status = http.StatusInternalServerError
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}
