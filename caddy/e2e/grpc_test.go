package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

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
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("gRPC server: listen: %v", err)
	}
	var mu sync.Mutex
	runs := map[string]int{}
	srv := grpc.NewServer()
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "orders.v1.Orders",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Create", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			md, _ := metadata.FromIncomingContext(ctx)
			key := strings.Join(md.Get("idempotency-key"), ",")
			mu.Lock()
			runs[key]++
			n := runs[key]
			mu.Unlock()
			_ = grpc.SetTrailer(ctx, metadata.Pairs("x-order-id", fmt.Sprintf("ord-%s-%d", key, n)))
			return wrapperspb.String(fmt.Sprintf("%s#%d", in.GetValue(), n)), nil
		}}},
	}, struct{}{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	c := runCaddy(t, caddySite{
		YAML:        grpcYAML,
		Global:      "servers {\n\t\tprotocols h1 h2 h2c\n\t}",
		Idempotency: fmt.Sprintf("store_addrs %s\n\t\tkey_prefix caddy-grpc:", vk.Addr()),
		After:       "reverse_proxy h2c://" + lis.Addr().String(),
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
		if err := conn.Invoke(ctx, "/orders.v1.Orders/Create", wrapperspb.String("order"), out, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
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
	mu.Lock()
	defer mu.Unlock()
	if n := runs["g-1"]; n != 1 {
		t.Fatalf("the gRPC server ran the call %d times, want 1", n)
	}
}
