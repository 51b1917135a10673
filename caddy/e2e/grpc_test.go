package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgate/idemgate/internal/grpcorderstest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// grpcYAML is idemgateYAML with the route of the gRPC method the test
// calls, a key required.
const grpcYAML = idemgateYAML + `
routes:
  - name: create
    match: "grpc orders.v1.Orders/Create"
    required: true
`

// TestCaddyGRPCThroughH2C: gRPC through Caddy as caddy/README.md shows it
// (servers { protocols h1 h2 h2c } in the global options, reverse_proxy
// h2c://), a grpc-go client and server without TLS. The retry of a keyed
// call is the stored answer, message and trailers, with
// idempotent-replayed: true, and the server ran once.
func TestCaddyGRPCThroughH2C(t *testing.T) {
	vk := valkeytest.Start(t)
	orders := grpcorderstest.New(grpcorderstest.Echo)
	addr := orders.Serve(t)

	c := runCaddy(t, caddySite{
		YAML:        grpcYAML,
		Global:      "servers {\n\t\tprotocols h1 h2 h2c\n\t}",
		Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-grpc:", vk.Addr()),
		After:       "reverse_proxy h2c://" + addr,
	})
	conn, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(c.URL, "http://"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })

	call := func() (value string, header, trailer metadata.MD) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "x-user", "alice", "idempotency-key", "g-1")
		out := new(wrapperspb.StringValue)
		if err := conn.Invoke(ctx, grpcorderstest.CreateMethod, wrapperspb.String("order"), out, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
			t.Fatalf("Create through Caddy: %v\n%s", err, c.out.String())
		}
		return out.GetValue(), header, trailer
	}
	first, firstHeader, _ := call()
	if first != "order#1" || len(firstHeader.Get("idempotent-replayed")) > 0 {
		t.Fatalf("first: %q, header %v", first, firstHeader)
	}
	retry, header, trailer := call()
	if retry != first || strings.Join(trailer.Get("x-order-id"), ",") != "ord-g-1-1" {
		t.Fatalf("retry: %q trailers %v, want %q with the first call's trailers", retry, trailer, first)
	}
	if got := strings.Join(header.Get("idempotent-replayed"), ","); got != "true" {
		t.Fatalf("retry header idempotent-replayed %q", got)
	}
	if n := orders.Executions("g-1"); n != 1 {
		t.Fatalf("the gRPC server ran the call %d times, want 1", n)
	}
}
