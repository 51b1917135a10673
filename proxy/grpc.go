package proxy

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/problem"
)

// isGRPC reports whether h is the header of a gRPC call: a Content-Type
// of application/grpc, or application/grpc+proto, +json or any other
// +suffix (gRPC over HTTP/2, "Requests"), or a gRPC-Web one (isGRPCWeb).
// A gRPC-Web call is a gRPC call to idemgate: its outcome is its
// grpc-status, not its HTTP status, and idemgate answers it with gRPC
// statuses, which a gRPC-Web client reads from the headers of a
// trailers-only response as a gRPC client does.
func isGRPC(h http.Header) bool {
	return grpcMediaType(h.Get("Content-Type")) != ""
}

// isGRPCWeb reports whether h is the header of a gRPC-Web call or
// answer: application/grpc-web or application/grpc-web-text, each with an
// optional +suffix (gRPC-Web, doc/PROTOCOL-WEB.md in the grpc
// repository).
func isGRPCWeb(h http.Header) bool {
	return strings.HasPrefix(grpcMediaType(h.Get("Content-Type")), "application/grpc-web")
}

// grpcMediaType returns ct's media type, lowercased, when it is one of
// the gRPC family (application/grpc, application/grpc-web,
// application/grpc-web-text, each with an optional +suffix), else "".
func grpcMediaType(ct string) string {
	if !strings.HasPrefix(strings.ToLower(ct), "application/grpc") {
		return ""
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ""
	}
	for _, base := range [...]string{"application/grpc", "application/grpc-web", "application/grpc-web-text"} {
		if mt == base || strings.HasPrefix(mt, base+"+") {
			return mt
		}
	}
	return ""
}

// grpcOutbound adjusts an enforced gRPC call's outbound request (no-op
// for any other request). TE: trailers goes on: the client sent it (the
// gRPC protocol requires it, to detect proxies that drop trailers), the
// hop-by-hop removal took it off, and a gRPC server may refuse a call
// without it; it is the one TE value HTTP/2 allows (RFC 9113 section
// 8.2.2).
//
// grpc-timeout is replaced by what is left of the upstream call's own
// deadline (upstream.timeout, set on out's context by forward): the call
// is detached from the client, so that a client that gives up does not
// cut it short and its answer is recorded for the retry. Forwarding the
// client's deadline instead made a handler slower than it answer
// DEADLINE_EXCEEDED, which a retry with a longer deadline could then
// never get past while the claim was held.
func (p *Proxy) grpcOutbound(out *http.Request) {
	if !isGRPC(out.Header) {
		return
	}
	if !isGRPCWeb(out.Header) { // gRPC-Web needs no HTTP trailers
		out.Header["Te"] = []string{"trailers"}
	}
	if dl, ok := out.Context().Deadline(); ok {
		out.Header["Grpc-Timeout"] = []string{grpcTimeout(time.Until(dl))}
	}
}

// grpcTimeout renders d as a grpc-timeout value (gRPC over HTTP/2,
// "Requests": at most 8 digits and a unit), rounded up to the
// millisecond, or to the second past 8 digits of milliseconds; at least
// 1m. Up, so that the server's deadline never comes before the detached
// call's own: a server cut off first may turn its deadline into a
// transient code (INTERNAL, UNAVAILABLE), which would release the key of
// a call that may have acted, where the proxy's own deadline keeps it
// (outcome unknown).
func grpcTimeout(d time.Duration) string {
	ms := max(int64((d+time.Millisecond-1)/time.Millisecond), 1)
	if ms < 1e8 {
		return strconv.FormatInt(ms, 10) + "m"
	}
	return strconv.FormatInt(min((ms+999)/1000, 99999999), 10) + "S"
}

// grpcStatus returns a gRPC response's grpc-status: from its trailers, or
// from its headers in a trailers-only response (gRPC over HTTP/2,
// "Responses"). A gRPC-Web answer (web: the call was gRPC-Web) carries
// its trailers in the body instead, as its last frame (grpcWebStatus).
func grpcStatus(resp *http.Response, body []byte, web bool) (string, bool) {
	if v, ok := resp.Trailer["Grpc-Status"]; ok && len(v) > 0 {
		return v[0], true
	}
	if v, ok := resp.Header["Grpc-Status"]; ok && len(v) > 0 {
		return v[0], true
	}
	if web {
		return grpcWebStatus(body, strings.HasPrefix(grpcMediaType(resp.Header.Get("Content-Type")), "application/grpc-web-text"))
	}
	return "", false
}

// grpcWebStatus returns the grpc-status of a gRPC-Web response body
// (base64 first when text): its frames are gRPC's length-prefixed
// messages, the last one a trailer frame, flag 0x80, whose payload is
// header lines (`grpc-status: 14\r\n`, names in any case). A body that
// does not end in exactly one well-formed, uncompressed trailer frame
// has no status: its outcome is unknown, as a gRPC answer without
// grpc-status, never released as transient nor stored.
func grpcWebStatus(body []byte, text bool) (string, bool) {
	if text {
		var ok bool
		if body, ok = decodeGRPCWebText(body); !ok {
			return "", false
		}
	}
	for len(body) >= 5 {
		flag, n := body[0], binary.BigEndian.Uint32(body[1:5])
		if uint64(len(body)-5) < uint64(n) {
			return "", false
		}
		payload := body[5 : 5+n]
		body = body[5+n:]
		if flag&0x80 == 0 {
			continue
		}
		if flag != 0x80 || len(body) != 0 {
			return "", false
		}
		for line := range strings.SplitSeq(string(payload), "\n") {
			name, value, ok := strings.Cut(strings.TrimSuffix(line, "\r"), ":")
			if ok && strings.EqualFold(strings.TrimSpace(name), "grpc-status") {
				return strings.TrimSpace(value), true
			}
		}
		return "", false
	}
	return "", false
}

// decodeGRPCWebText decodes a gRPC-Web text body: base64, possibly several
// padded chunks one after another (a server may encode each frame on its
// own), so it is decoded 4 characters at a time.
func decodeGRPCWebText(b []byte) ([]byte, bool) {
	if len(b)%4 != 0 {
		return nil, false
	}
	out := make([]byte, 0, len(b)/4*3)
	var quad [3]byte
	for ; len(b) > 0; b = b[4:] {
		n, err := base64.StdEncoding.Decode(quad[:], b[:4])
		if err != nil {
			return nil, false
		}
		out = append(out, quad[:n]...)
	}
	return out, true
}

// grpcNotStored decides an enforced gRPC call answered with a replayable
// HTTP status by its grpc-status (policy.Route.GRPCVerdictOf), once its
// body (max_response_bytes at most) and trailers are read: HTTP 200 says
// nothing of a gRPC call's outcome. A transient code is passed on and the
// key released; CANCELLED, DEADLINE_EXCEEDED or no status are passed on
// with the claim kept until its lease ends (outcome unknown). It reports
// whether it answered; false leaves the response to be stored. A body
// over max_response_bytes (trailers not read yet) is left to the
// not-retained path. ctx is the call's: when its deadline ended before
// the answer, the proxy answers an unknown outcome upstream-timeout, as
// its own deadline is answered; in process (the handler's context ended
// under it) the handler's status is passed on and a transient code leaves
// the outcome unknown too.
func (p *Proxy) grpcNotStored(w http.ResponseWriter, r *http.Request, ex *exchange, token string, resp *http.Response, body []byte, ctx context.Context, stopHeartbeat func()) bool {
	if !isGRPC(r.Header) || int64(len(body)) > ex.route.MaxResponseBytes {
		return false
	}
	st, ok := grpcStatus(resp, body, isGRPCWeb(r.Header))
	v := ex.route.GRPCVerdictOf(st, ok)
	// The call's deadline had ended when its status came: the upstream's
	// own deadline is the one idemgate sent (grpc-timeout, rounded up), so
	// whatever it answered then is the timeout's. The deadline is read
	// from the clock as well as from ctx.Err: on a loaded machine the
	// context's timer may not have run yet when an answer sent at the
	// deadline arrives.
	late := deadlinePassed(ctx)
	if v == policy.GRPCRelease && late && p.next != nil {
		v = policy.GRPCUnknown
	}
	if v == policy.GRPCStore {
		return false
	}
	stopHeartbeat()
	if v == policy.GRPCUnknown && late && p.next == nil {
		// Answered as the proxy answers a call its deadline cut:
		// upstream-timeout, claim kept, whichever timer won the race at
		// the deadline (TestGRPCUpstreamTimeout).
		p.upstreamAmbiguous(w, r, ex, ctx, fmt.Errorf("the upstream answered grpc-status %s after upstream.timeout", st))
		return true
	}
	if v == policy.GRPCRelease {
		p.release(r, ex, token)
	} else {
		p.log.Warn("gRPC call ended with a status that leaves its outcome unknown; not stored, the key stays claimed until its lease ends",
			"route", ex.route.Name, "key_hash", keyHash(ex.id), "grpc_status", st)
	}
	ex.outcome, ex.status = metrics.OutcomeForwarded, resp.StatusCode
	p.copyResponse(w, r, ex, resp, body)
	return true
}

// deadlinePassed reports whether ctx has ended or its deadline, read from
// the clock, has come.
func deadlinePassed(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// answerProblem writes pr as writeProblem does, or, to a gRPC call, as a
// trailers-only gRPC response (problem.Publisher.WriteGRPC): a gRPC
// client reads no body from an answer without grpc-status, and took
// every problem for UNKNOWN or INTERNAL, key reuse and a transient
// failure alike. The gRPC form replaces the route's problems template.
func (p *Proxy) answerProblem(w http.ResponseWriter, r *http.Request, ex *exchange, pr problem.Details) {
	if r == nil || !isGRPC(r.Header) {
		p.writeProblem(w, ex, pr)
		return
	}
	if ex != nil {
		pr.RequestID = ex.requestID
	}
	p.problems.WriteGRPC(w, pr, r.Header.Get("Content-Type"))
}
