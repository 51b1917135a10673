package proxy

import (
	"net/http"

	"github.com/idemgate/idemgate/problem"
)

// ProblemBase is the prefix of every problem type URI (problem.Base).
const ProblemBase = problem.Base

// Problem is an RFC 9457 problem details object, the body of every error
// response the proxy produces (problem.Details).
type Problem = problem.Details

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
	probInvalidCreds      = problemKind{"invalid-credentials", http.StatusUnauthorized, "Credentials missing or invalid"}
	probBadRequest        = problemKind{"bad-request", http.StatusBadRequest, "Request body could not be read"}
	probAmbiguous         = problemKind{"ambiguous-request", http.StatusBadRequest, "Request form is ambiguous"}
	probTooLarge          = problemKind{"request-too-large", http.StatusRequestEntityTooLarge, "Request body too large"}
	probMismatch          = problemKind{"key-reused", http.StatusUnprocessableEntity, "Idempotency key reused for a different request"}
	probInProgress        = problemKind{"request-in-progress", http.StatusConflict, "A request with this idempotency key is still in progress"}
	probNotRetained       = problemKind{"response-not-retained", http.StatusConflict, "The original response was not retained"}
	probOutcomeUnknown    = problemKind{"outcome-unknown", http.StatusConflict, "The outcome of the original request is unknown"}
	probShuttingDown      = problemKind{"shutting-down", http.StatusServiceUnavailable, "idemgate is shutting down"}
	probStoreUnavailable  = problemKind{"store-unavailable", http.StatusServiceUnavailable, "Idempotency store unavailable"}
	probUpstreamUnreached = problemKind{"upstream-unreachable", http.StatusBadGateway, "Upstream unreachable"}
	probUpstreamFailed    = problemKind{"upstream-failed", http.StatusBadGateway, "Upstream exchange failed; outcome unknown"}
	probUpstreamTimeout   = problemKind{"upstream-timeout", http.StatusGatewayTimeout, "Upstream timed out; outcome unknown"}
)

func (k problemKind) with(detail string) Problem {
	return problem.New(k.slug, k.status, k.title, detail)
}
