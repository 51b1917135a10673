package policy

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// gRPC status codes by name, as in grpc/codes and the gRPC status code
// list (doc/statuscodes.md in the grpc repository); the index is the code.
var grpcCodeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
	"UNAUTHENTICATED",
}

// The gRPC status codes that say the upstream may or may not have acted:
// the call was cut short (by a deadline or a cancellation) at a point the
// caller cannot know, so a gRPC answer with one of them is neither stored
// nor released (outcome unknown, as a 504).
const (
	GRPCCancelled        = 1
	GRPCDeadlineExceeded = 4
)

// DefaultReplayGRPCCodes are the grpc-status codes stored and replayed on
// a route without replay_grpc_codes: OK and the codes that are the
// operation's answer (the same request gets the same one again). Every
// other code but CANCELLED and DEADLINE_EXCEEDED is transient (UNAVAILABLE,
// RESOURCE_EXHAUSTED, ABORTED, INTERNAL, UNKNOWN, DATA_LOSS): the answer is
// passed on and the key released, so a retry runs the call again.
var DefaultReplayGRPCCodes = []int{0, 3, 5, 6, 7, 9, 11, 12, 16}

// GRPCCodeName returns code's name ("NOT_FOUND"), or its number for a code
// outside 0-16.
func GRPCCodeName(code int) string {
	if code >= 0 && code < len(grpcCodeNames) {
		return grpcCodeNames[code]
	}
	return strconv.Itoa(code)
}

// ParseGRPCCode parses one replay_grpc_codes entry: a code's name in any
// letter case ("NOT_FOUND", "not_found") or its number (0-16). CANCELLED
// and DEADLINE_EXCEEDED are refused: their outcome is unknown, so they
// are never stored.
func ParseGRPCCode(s string) (int, error) {
	s = strings.TrimSpace(s)
	code := slices.Index(grpcCodeNames[:], strings.ToUpper(s))
	if n, err := strconv.Atoi(s); err == nil {
		code = n
	}
	if code < 0 || code >= len(grpcCodeNames) {
		return 0, fmt.Errorf("%q is not a gRPC status code (a name such as NOT_FOUND, or 0-16)", s)
	}
	if code == GRPCCancelled || code == GRPCDeadlineExceeded {
		return 0, fmt.Errorf("%s: a call cut short by a deadline or a cancellation may or may not have acted, so it is never stored", grpcCodeNames[code])
	}
	return code, nil
}

// GRPCCodes returns the route's replay_grpc_codes, or
// DefaultReplayGRPCCodes when it sets none.
func (r *Route) GRPCCodes() []int {
	if r.ReplayGRPCCodes == nil {
		return DefaultReplayGRPCCodes
	}
	return r.ReplayGRPCCodes
}

// GRPCVerdict is what becomes of a gRPC call's claim once its grpc-status
// is known.
type GRPCVerdict int

// The gRPC verdicts.
const (
	// GRPCStore: the code is the operation's answer; store and replay it.
	GRPCStore GRPCVerdict = iota
	// GRPCRelease: a transient failure; pass it on and free the key.
	GRPCRelease
	// GRPCUnknown: the call may have acted (CANCELLED, DEADLINE_EXCEEDED,
	// or no valid grpc-status); pass it on, keep the claim until its
	// lease ends, never store it.
	GRPCUnknown
)

// GRPCVerdictOf decides a gRPC call by its grpc-status value (gRPC over
// HTTP/2, "Responses": a decimal code in the trailers, or in the headers
// of a trailers-only response); ok is false when there was none.
func (r *Route) GRPCVerdictOf(status string, ok bool) GRPCVerdict {
	code, err := strconv.Atoi(status)
	switch {
	case !ok || err != nil || code < 0:
		return GRPCUnknown
	case code == GRPCCancelled || code == GRPCDeadlineExceeded:
		return GRPCUnknown
	case slices.Contains(r.GRPCCodes(), code):
		return GRPCStore
	}
	return GRPCRelease
}

// checkGRPCCodes reports a replay_grpc_codes entry out of range or one
// that is never stored.
func checkGRPCCodes(r *Route, bad func(key, format string, args ...any)) {
	for _, c := range r.ReplayGRPCCodes {
		if _, err := ParseGRPCCode(strconv.Itoa(c)); err != nil {
			bad("replay_grpc_codes", "%v", err)
		}
	}
}

// grpcCodeList renders codes by name, for validate and idemgate policy.
func grpcCodeList(codes []int) []string {
	out := make([]string, len(codes))
	for i, c := range codes {
		out[i] = GRPCCodeName(c)
	}
	return out
}

// GRPCCodeNames returns the route's stored gRPC codes by name.
func (r *Route) GRPCCodeNames() []string { return grpcCodeList(r.GRPCCodes()) }

// grpcName matches a gRPC service's full name (package.Service) and an
// optional method, as in the :path of a call, /package.Service/Method.
var grpcName = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?:/([A-Za-z_][A-Za-z0-9_]*))?$`)

// GRPCMatch turns a route's `match: "grpc orders.v1.Orders/Create"` into
// the ServeMux pattern of that call, "POST /orders.v1.Orders/Create" (a
// gRPC unary call is an HTTP/2 POST to /package.Service/Method), and
// `match: "grpc orders.v1.Orders"` into "POST /orders.v1.Orders/", every
// method of the service. ok is false for a match that does not start with
// "grpc "; err says why a grpc match is malformed.
func GRPCMatch(match string) (pattern string, ok bool, err error) {
	rest, ok := strings.CutPrefix(match, "grpc ")
	if !ok {
		return "", false, nil
	}
	rest = strings.TrimSpace(rest)
	m := grpcName.FindStringSubmatch(rest)
	if m == nil {
		return "", true, fmt.Errorf("%q is not a gRPC service (package.Service) or method (package.Service/Method)", rest)
	}
	if m[2] == "" {
		return "POST /" + m[1] + "/", true, nil
	}
	return "POST /" + m[1] + "/" + m[2], true, nil
}

// GRPCMethodOf returns the gRPC service or method a ServeMux path names,
// "orders.v1.Orders/Create", or "orders.v1.Orders/*" for a service's
// prefix; "" for a path that names none (idemgate policy lists it).
func GRPCMethodOf(path string) string {
	rest, ok := strings.CutPrefix(path, "/")
	if !ok {
		return ""
	}
	if svc, ok := strings.CutSuffix(rest, "/"); ok {
		if m := grpcName.FindStringSubmatch(svc); m != nil && m[2] == "" && strings.Contains(svc, ".") {
			return svc + "/*"
		}
		return ""
	}
	if m := grpcName.FindStringSubmatch(rest); m != nil && m[2] != "" && strings.Contains(m[1], ".") {
		return rest
	}
	return ""
}
