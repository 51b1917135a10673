package middleware_test

import (
	"net/http"
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
	call := func(key, msg string) *http.Response {
		resp, err := grpcwebtest.Call(http.DefaultClient, srv.URL+"/orders.v1.Orders/Create", key, msg)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i := range 3 {
		resp := call("w1", "a")
		if resp.StatusCode != http.StatusOK || (resp.Header.Get("Idempotent-Replayed") == "true") != (i == 2) {
			t.Fatalf("call %d: %d, replayed %q", i+1, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
		}
	}
	if n := h.Runs("w1"); n != 2 {
		t.Fatalf("the handler ran %d times, want 2 (UNAVAILABLE, then OK, then its replay)", n)
	}
	if resp := call("w1", "b"); resp.StatusCode != http.StatusOK || resp.Header.Get("Grpc-Status") != "9" {
		t.Fatalf("key reused: %d grpc-status %q, want 200 and 9", resp.StatusCode, resp.Header.Get("Grpc-Status"))
	}
}
