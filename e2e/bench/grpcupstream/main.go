// Command grpcupstream is the benchmark's gRPC backend: orders.v1.Orders/Create
// (a google.protobuf.StringValue in, the same out, with an x-order-id
// trailer) on a plain listener, which grpc-go serves as HTTP/2 with prior
// knowledge (h2c), as a sidecar or an in-cluster service does. It prints
// its address on stdout.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

type orders struct{ calls atomic.Int64 }

func (o *orders) create(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	in := new(wrapperspb.StringValue)
	if err := dec(in); err != nil {
		return nil, err
	}
	n := o.calls.Add(1)
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-order-id", fmt.Sprintf("ord-%d", n)))
	return wrapperspb.String(in.GetValue()), nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on (loopback only)")
	flag.Parse()
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	o := &orders{}
	s := grpc.NewServer()
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "orders.v1.Orders",
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{{MethodName: "Create", Handler: o.create}},
	}, o)
	fmt.Fprintln(os.Stdout, l.Addr().String())
	log.Fatal(s.Serve(l))
}
