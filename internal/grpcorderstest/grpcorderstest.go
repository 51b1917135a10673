// Package grpcorderstest is the gRPC service that the gRPC tests of every
// shape put behind idemgate: a unary orders.v1.Orders/Create taking and
// returning a google.protobuf.StringValue, registered by hand so that no
// generated code is needed, which counts its executions per idempotency
// key so that a test can tell a replay from a second run.
package grpcorderstest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// CreateMethod is the full name of the method the tests call.
const CreateMethod = "/orders.v1.Orders/Create"

// Handler answers the n-th execution (from 1) of key.
type Handler func(ctx context.Context, key string, n int, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)

// Echo answers OK with the request's value numbered by execution
// ("order#1").
func Echo(_ context.Context, _ string, n int, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	return wrapperspb.String(fmt.Sprintf("%s#%d", in.GetValue(), n)), nil
}

// Service is orders.v1.Orders. Create counts the call under its key,
// sets the trailer x-order-id to "ord-KEY-N" and answers what handle
// returns.
type Service struct {
	mu     sync.Mutex
	calls  map[string]int
	handle Handler
	more   []grpc.MethodDesc
}

// New returns the service that answers Create with handle and has the
// methods of more besides (which may count their calls with Count).
func New(handle Handler, more ...grpc.MethodDesc) *Service {
	return &Service{calls: map[string]int{}, handle: handle, more: more}
}

// Register registers orders.v1.Orders on s.
func (o *Service) Register(s *grpc.Server) {
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "orders.v1.Orders",
		HandlerType: (*any)(nil),
		Methods:     append([]grpc.MethodDesc{{MethodName: "Create", Handler: o.create}}, o.more...),
	}, o)
}

// Serve runs a grpc-go server (HTTP/2 without TLS) with the service on a
// loopback port, stopped in t.Cleanup, and returns its host:port. The
// server is handed to each of register first.
func (o *Service) Serve(t testing.TB, register ...func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("gRPC server: listen: %v", err)
	}
	s := grpc.NewServer()
	o.Register(s)
	for _, r := range register {
		r(s)
	}
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func (o *Service) create(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	in := new(wrapperspb.StringValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	key, n := o.Count(ctx)
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-order-id", fmt.Sprintf("ord-%s-%d", key, n)))
	return o.handle(ctx, key, n, in)
}

// Count counts a call under the idempotency-key of its metadata (the
// values joined by commas, as sent: quotes kept) and returns that key
// and its count so far.
func (o *Service) Count(ctx context.Context) (key string, n int) {
	md, _ := metadata.FromIncomingContext(ctx)
	key = strings.Join(md.Get("idempotency-key"), ",")
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls[key]++
	return key, o.calls[key]
}

// Executions returns how many times key was executed.
func (o *Service) Executions(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls[key]
}
