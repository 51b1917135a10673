package problem

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// GRPCDomain is the ErrorInfo domain of every gRPC-form problem: the
// reason beside it is the kind's slug.
const GRPCDomain = "idemgate"

// grpcCodes maps each proxy kind to the gRPC status code a gRPC caller
// gets for it (docs/grpc.md, "Statuses idemgate answers with", keeps the same table; a test compares
// them). The rule: a code a retry policy resends by default
// (UNAVAILABLE) only where a retry with the same key is safe and may
// succeed, never where the upstream may have acted and the outcome is
// unknown (UNKNOWN, DEADLINE_EXCEEDED), and the conditions a retry
// cannot change are FAILED_PRECONDITION. request-in-progress is
// UNAVAILABLE with grpc-retry-pushback-ms rather than ABORTED: a retry
// with the same key is always safe through idemgate (it waits for the
// running call and gets its replay), most retry policies list
// UNAVAILABLE and few list ABORTED, and the pushback makes the policy
// wait the hinted time instead of its own backoff.
var grpcCodes = map[string]codes.Code{
	InvalidKey.Slug:            codes.InvalidArgument,
	MissingKey.Slug:            codes.InvalidArgument,
	MissingOwner.Slug:          codes.Unauthenticated,
	InvalidCredentials.Slug:    codes.Unauthenticated,
	BadRequest.Slug:            codes.InvalidArgument,
	Ambiguous.Slug:             codes.InvalidArgument,
	TooLarge.Slug:              codes.ResourceExhausted,
	KeyReused.Slug:             codes.FailedPrecondition,
	InProgress.Slug:            codes.Unavailable,
	NotRetained.Slug:           codes.FailedPrecondition,
	OutcomeUnknown.Slug:        codes.FailedPrecondition,
	ResourceDeleted.Slug:       codes.FailedPrecondition,
	ShuttingDown.Slug:          codes.Unavailable,
	StoreUnavailable.Slug:      codes.Unavailable,
	Overloaded.Slug:            codes.Unavailable,
	StoredResponseDamaged.Slug: codes.DataLoss,
	OwnerSourceConflict.Slug:   codes.FailedPrecondition,
	UpstreamUnreachable.Slug:   codes.Unavailable,
	UpstreamFailed.Slug:        codes.Unknown,
	UpstreamTimeout.Slug:       codes.DeadlineExceeded,
	RequestTrailers.Slug:       codes.InvalidArgument,
	HTTP2Preface.Slug:          codes.InvalidArgument,
	AsteriskTarget.Slug:        codes.InvalidArgument,
}

// GRPCCode returns the gRPC status code of kind k's answers to a gRPC
// call; UNKNOWN for a kind the proxy never answers with (the admin
// listener's).
func (k Kind) GRPCCode() codes.Code {
	if c, ok := grpcCodes[k.Slug]; ok {
		return c
	}
	return codes.Unknown
}

// WriteGRPC answers a gRPC call (contentType is its Content-Type, e.g.
// application/grpc+proto) with d as a trailers-only gRPC response (gRPC
// over HTTP/2, "Responses"): HTTP 200 and, in the headers, grpc-status
// (Kind.GRPCCode of d's kind), grpc-message (d's detail, else its title,
// percent-encoded), and grpc-status-details-bin, a google.rpc.Status with
// one google.rpc.ErrorInfo whose reason is the kind's slug, domain
// GRPCDomain, and metadata type (the problem type URI, under p.TypeBase),
// request_id and, when set, retry_after_seconds. A d with a Retry-After
// also carries grpc-retry-pushback-ms, which grpc-go's retry policy
// waits for (gRFC A6) before it retries a retryable code.
func (p Publisher) WriteGRPC(w http.ResponseWriter, d Details, contentType string) {
	if p.TypeBase != "" {
		if slug, ok := strings.CutPrefix(d.Type, Base); ok {
			d.Type = p.TypeBase + slug
		}
	}
	slug := slugOf(d.Type)
	k, _ := proxyKind(slug)
	code := k.GRPCCode()
	msg := d.Detail
	if msg == "" {
		msg = d.Title
	}
	info := &errdetails.ErrorInfo{Reason: slug, Domain: GRPCDomain, Metadata: map[string]string{"type": d.Type}}
	if d.RequestID != "" {
		info.Metadata["request_id"] = d.RequestID
	}
	if d.RetryAfter > 0 {
		info.Metadata["retry_after_seconds"] = strconv.Itoa(d.RetryAfter)
	}
	h := w.Header()
	if contentType == "" {
		contentType = "application/grpc"
	}
	h.Set("Content-Type", contentType)
	h.Set("Grpc-Status", strconv.Itoa(int(code)))
	h.Set("Grpc-Message", encodeGRPCMessage(msg))
	if detail, err := anypb.New(info); err == nil {
		if b, err := proto.Marshal(&spb.Status{Code: int32(code), Message: msg, Details: []*anypb.Any{detail}}); err == nil {
			h.Set("Grpc-Status-Details-Bin", base64.RawStdEncoding.EncodeToString(b))
		}
	}
	if d.RetryAfter > 0 {
		h.Set("Grpc-Retry-Pushback-Ms", strconv.Itoa(d.RetryAfter*1000))
	}
	if p.DocsURL != "" {
		h.Add("Link", "<"+p.DocsURL+`>; rel="describedby"`)
	}
	w.WriteHeader(http.StatusOK)
}

// encodeGRPCMessage percent-encodes s as grpc-message requires: every
// byte outside printable ASCII (0x20-0x7E), and '%' itself.
func encodeGRPCMessage(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c <= 0x7e && c != '%' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	return b.String()
}
