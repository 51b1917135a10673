package middleware_test

import (
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/grpcwebtest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestMiddlewareGRPCWeb: in process, as behind the proxy, a gRPC-Web
// call is a gRPC call: the handler's HTTP 200 whose body ends in a
// trailer frame with grpc-status 14 (UNAVAILABLE) releases the key, so
// the retry runs the handler again and its OK is what is replayed; key
// reuse is answered as grpc-status 9 in the headers of an HTTP 200, not
// as problem JSON. (Before: the UNAVAILABLE was stored and replayed.)
func TestMiddlewareGRPCWeb(t *testing.T) {
	v := valkeytest.Start(t)
	h := &grpcwebtest.Flaky{}
	cfg := strings.Replace(testConfig(v.Addr(), "grpcweb:"), `match: "POST /v1/orders"`, `match: "grpc orders.v1.Orders/Create"`, 1)
	srv := serve(t, cfg, h)
	grpcwebtest.CheckRelease(t, srv.URL+"/orders.v1.Orders/Create", h, "the handler")
}
