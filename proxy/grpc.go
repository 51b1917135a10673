package proxy

import (
	"mime"
	"net/http"
	"strings"
)

// isGRPC reports whether h is the header of a gRPC call: a Content-Type
// of application/grpc, or application/grpc+proto, +json or any other
// +suffix (gRPC over HTTP/2, "Requests").
func isGRPC(h http.Header) bool {
	ct := h.Get("Content-Type")
	if !strings.HasPrefix(strings.ToLower(ct), "application/grpc") {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/grpc" || strings.HasPrefix(mt, "application/grpc+"))
}

// grpcOutbound adjusts an enforced gRPC call's outbound request (no-op
// for any other request). TE: trailers goes on: the client sent it (the
// gRPC protocol requires it, to detect proxies that drop trailers), the
// hop-by-hop removal took it off, and a gRPC server may refuse a call
// without it; it is the one TE value HTTP/2 allows (RFC 9113 section
// 8.2.2).
func (p *Proxy) grpcOutbound(out *http.Request) {
	if !isGRPC(out.Header) {
		return
	}
	out.Header["Te"] = []string{"trailers"}
}
