package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/grpcorderstest"
	"github.com/idemgate/idemgate/internal/protodesctest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// placeMethod is orders.v1.Placer/Place, a PlaceRequest in and the same
// out, registered by hand on the grpc-go backend and decoded there with
// the server's schema (placeFile(false)).
const placeMethod = "/orders.v1.Placer/Place"

// placeFile is orders.v1's PlaceRequest and Placer service: as the server
// has it, {int64 amount = 1; repeated string items = 2;}, or one step
// older (old), {int32 amount = 1; string items = 2;}, two changes the
// protobuf guide calls compatible.
func placeFile(old bool) *descriptorpb.FileDescriptorProto {
	amount, items := descriptorpb.FieldDescriptorProto_TYPE_INT64, descriptorpb.FieldDescriptorProto_LABEL_REPEATED
	if old {
		amount, items = descriptorpb.FieldDescriptorProto_TYPE_INT32, descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
	}
	return &descriptorpb.FileDescriptorProto{
		Name: proto.String("orders_place.proto"), Package: proto.String("orders.v1"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("PlaceRequest"),
			Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("amount"), Number: proto.Int32(1), Type: amount.Enum(), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String("amount")},
				{Name: proto.String("items"), Number: proto.Int32(2), Type: descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), Label: items.Enum(), JsonName: proto.String("items")},
			},
		}},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Placer"),
			Method: []*descriptorpb.MethodDescriptorProto{{Name: proto.String("Place"),
				InputType: proto.String(".orders.v1.PlaceRequest"), OutputType: proto.String(".orders.v1.PlaceRequest")}},
		}},
	}
}

// placeRequestType is the server's PlaceRequest.
func placeRequestType(t testing.TB) protoreflect.MessageDescriptor {
	t.Helper()
	fd, err := protodesc.NewFile(placeFile(false), nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().ByName("PlaceRequest")
}

// registerPlacer serves orders.v1.Placer/Place on s for b: each call is
// decoded with the server's schema and counted per key, as Create.
func registerPlacer(t testing.TB, s *grpc.Server, b *grpcBackend) {
	in := placeRequestType(t)
	place := func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		msg := dynamicpb.NewMessage(in)
		if err := dec(msg); err != nil {
			return nil, err
		}
		b.Count(ctx)
		return msg, nil
	}
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "orders.v1.Placer",
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{{MethodName: "Place", Handler: place}},
	}, b)
}

// TestGRPCDescriptorsBehindServer: the gate's descriptors are one step
// older than the server's (int32 amount where the server has int64,
// singular items where it has repeated). amount=5 and then
// amount=2^32+5 with one key are two orders to the server, and so they
// must be to the gate: the second gets FAILED_PRECONDITION (key-reused)
// and the server runs once; the same for items [b] and then [a b]. A
// resend of the first message is still its replay. (Before: decoding
// under the older descriptors truncated 2^32+5 to 5 and kept the last
// item, so the second call got the first one's OK, replayed, and the
// client believed its second order placed.)
func TestGRPCDescriptorsBehindServer(t *testing.T) {
	descriptors := protodesctest.Write(t, "place.binpb", placeFile(true))
	b := startGRPCBackend(t, grpcorderstest.Echo)
	c := grpcGateConfig(b.addr)
	c.Routes += "  - name: place\n    match: \"grpc orders.v1.Placer/Place\"\n    required: true\n" +
		"    fingerprint: {body: protobuf, descriptors: \"" + descriptors + "\"}\n"
	conn := grpcClient(t, startGate(t, c))
	typ := placeRequestType(t)
	place := func(key string, amount int64, items ...string) grpcCall {
		msg := dynamicpb.NewMessage(typ)
		msg.Set(typ.Fields().ByName("amount"), protoreflect.ValueOfInt64(amount))
		list := msg.Mutable(typ.Fields().ByName("items")).List()
		for _, it := range items {
			list.Append(protoreflect.ValueOfString(it))
		}
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice", "idempotency-key", key), 10*time.Second)
		defer cancel()
		var call grpcCall
		call.err = conn.Invoke(ctx, placeMethod, msg, dynamicpb.NewMessage(typ), grpc.Header(&call.header), grpc.ForceCodec(stableCodec{}))
		return call
	}

	if c := place("amount-1", 5); c.err != nil {
		t.Fatalf("amount=5: %v", c.err)
	}
	wantStatus(t, "same key, amount=2^32+5", place("amount-1", 1<<32+5), codes.FailedPrecondition, "key-reused")
	if r := place("amount-1", 5); r.err != nil || strings.Join(r.header.Get("idempotent-replayed"), ",") != "true" {
		t.Fatalf("resend of amount=5: %v, replayed %q", r.err, r.header.Get("idempotent-replayed"))
	}
	if n := b.Executions("amount-1"); n != 1 {
		t.Fatalf("amount-1 executions %d, want 1", n)
	}

	if c := place("items-1", 7, "b"); c.err != nil {
		t.Fatalf("items=[b]: %v", c.err)
	}
	wantStatus(t, "same key, items=[a b]", place("items-1", 7, "a", "b"), codes.FailedPrecondition, "key-reused")
	if n := b.Executions("items-1"); n != 1 {
		t.Fatalf("items-1 executions %d, want 1", n)
	}
	// The server's two items, a message the older descriptors cannot
	// hold, is fingerprinted by its bytes: its resend is its replay.
	if c := place("items-2", 7, "a", "b"); c.err != nil {
		t.Fatalf("items=[a b]: %v", c.err)
	}
	if r := place("items-2", 7, "a", "b"); r.err != nil || strings.Join(r.header.Get("idempotent-replayed"), ",") != "true" {
		t.Fatalf("resend of items=[a b]: %v, replayed %q", r.err, r.header.Get("idempotent-replayed"))
	}
	if n := b.Executions("items-2"); n != 1 {
		t.Fatalf("items-2 executions %d, want 1", n)
	}
}

// stableCodec marshals a message with its fields in one order every time,
// as generated code does. A dynamicpb message marshals its fields in map
// order, so two sends of one message may differ on the wire, and a message
// the gate's descriptors cannot hold is fingerprinted by exactly those
// bytes (never folded): its honest resend would be refused 422 at random.
type stableCodec struct{}

func (stableCodec) Marshal(v any) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(v.(proto.Message))
}

func (stableCodec) Unmarshal(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }

func (stableCodec) Name() string { return "proto" }
