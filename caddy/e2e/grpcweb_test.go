package e2e

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/grpcwebtest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestCaddyGRPCWeb: a gRPC-Web call through Caddy's reverse_proxy to a
// gRPC-Web upstream (HTTP/1.1). Its HTTP 200 whose body ends in a trailer
// frame with grpc-status 14 (UNAVAILABLE) releases the key, so the retry
// reaches the upstream again and its OK is what is replayed; key reuse is
// grpc-status 9 in the headers of an HTTP 200. (Before: the UNAVAILABLE
// was stored and replayed, key reuse a 422 problem+json.)
func TestCaddyGRPCWeb(t *testing.T) {
	vk := valkeytest.Start(t)
	h := &grpcwebtest.Flaky{}
	up := httptest.NewServer(h)
	t.Cleanup(up.Close)
	c := runCaddy(t, caddySite{
		YAML:        grpcYAML,
		Idempotency: "store_addrs " + vk.Addr() + "\n\t\tkey_prefix caddy-grpcweb:",
		After:       "reverse_proxy " + strings.TrimPrefix(up.URL, "http://"),
	})
	call := func(key, msg string) *http.Response {
		resp, err := grpcwebtest.Call(http.DefaultClient, c.URL+"/orders.v1.Orders/Create", key, msg)
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
		t.Fatalf("the upstream ran %d times, want 2 (UNAVAILABLE, then OK, then its replay)", n)
	}
	if resp := call("w1", "b"); resp.StatusCode != http.StatusOK || resp.Header.Get("Grpc-Status") != "9" {
		t.Fatalf("key reused: %d grpc-status %q, want 200 and 9", resp.StatusCode, resp.Header.Get("Grpc-Status"))
	}
}
