package e2e

import (
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
	grpcwebtest.CheckRelease(t, c.URL+"/orders.v1.Orders/Create", h, "the upstream")
}
