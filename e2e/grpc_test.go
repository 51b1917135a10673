package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgate/idemgate/internal/grpcorderstest"
	"github.com/idemgate/idemgate/internal/h1only"
	"github.com/idemgate/idemgate/internal/protodesctest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// createMethod is the gRPC method every test here calls
// (grpcorderstest's orders.v1.Orders/Create).
const createMethod = grpcorderstest.CreateMethod

// grpcHandler answers the n-th execution (from 1) of key.
type grpcHandler = grpcorderstest.Handler

// grpcBackend is a real grpc-go server (HTTP/2 without TLS) with
// grpcorderstest's orders.v1.Orders, which counts the executions per
// idempotency key, and the method Tag besides.
type grpcBackend struct {
	*grpcorderstest.Service
	addr string
}

func startGRPCBackend(t testing.TB, handle grpcHandler) *grpcBackend {
	t.Helper()
	b := &grpcBackend{}
	b.Service = grpcorderstest.New(handle, grpc.MethodDesc{MethodName: "Tag", Handler: b.tag})
	b.addr = b.Serve(t, func(s *grpc.Server) { registerPlacer(t, s, b) })
	return b
}

// tag is orders.v1.Orders/Tag: a google.protobuf.Struct in, the same
// out; a message with a map field (Struct.fields), counted as Create.
func (b *grpcBackend) tag(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	in := new(structpb.Struct)
	if err := dec(in); err != nil {
		return nil, err
	}
	b.Count(ctx)
	return in, nil
}

// grpcGateConfig is a gate whose plain listener serves h2c and whose
// upstream is the gRPC backend at addr over h2c, with the route
// orders.v1.Orders/Create (key required).
func grpcGateConfig(addr string, routeSettings ...string) gateConfig {
	route := "  - name: create\n    match: \"grpc orders.v1.Orders/Create\"\n    required: true\n"
	for _, s := range routeSettings {
		route += "    " + s + "\n"
	}
	return gateConfig{Upstream: "h2c://" + addr, Extra: "server:\n  h2c: true\n", Routes: route}
}

// grpcClient dials the gate's plain listener with HTTP/2 prior knowledge
// (grpc-go without TLS); opts add dial options (a service config).
func grpcClient(t *testing.T, g *Gate, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(g.URL, "http://"),
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// grpcCall is one call's result.
type grpcCall struct {
	value   string
	header  metadata.MD
	trailer metadata.MD
	err     error
}

// create calls orders.v1.Orders/Create as user with key (each omitted when
// "") and value, within d.
func create(conn *grpc.ClientConn, d time.Duration, user, key, value string) grpcCall {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var pairs []string
	if user != "" {
		pairs = append(pairs, "x-user", user)
	}
	if key != "" {
		pairs = append(pairs, "idempotency-key", key)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, pairs...)
	out := new(wrapperspb.StringValue)
	var c grpcCall
	c.err = conn.Invoke(ctx, createMethod, wrapperspb.String(value), out, grpc.Header(&c.header), grpc.Trailer(&c.trailer))
	c.value = out.GetValue()
	return c
}

// reason returns the ErrorInfo reason idemgate put in err's status details
// ("" when none), after checking its domain.
func reason(t *testing.T, err error) string {
	t.Helper()
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			if info.Domain != "idemgate" {
				t.Errorf("ErrorInfo domain %q", info.Domain)
			}
			return info.Reason
		}
	}
	return ""
}

// wantStatus fails unless c ended with code and, when set, ErrorInfo
// reason slug.
func wantStatus(t *testing.T, what string, c grpcCall, code codes.Code, slug string) {
	t.Helper()
	if got := status.Code(c.err); got != code {
		t.Fatalf("%s: %v, want %v", what, c.err, code)
	}
	if slug != "" {
		if got := reason(t, c.err); got != slug {
			t.Fatalf("%s: ErrorInfo reason %q, want %q (%v)", what, got, slug, c.err)
		}
	}
}

// TestGRPCWithoutH2CSaysWhy: grpc-go without TLS against a listener
// without server.h2c fails at once with UNAVAILABLE, and the error says to
// enable server.h2c: idemgate answers the HTTP/2 preface with a GOAWAY
// whose debug data says so. (Before: an HTTP/1.1 505 that grpc-go read as
// a frame, "http2: frame too large", with no word of the cause.) Nothing
// reaches the backend.
func TestGRPCWithoutH2CSaysWhy(t *testing.T) {
	b := startGRPCBackend(t, grpcorderstest.Echo)
	cfg := grpcGateConfig(b.addr)
	cfg.Extra = ""
	g := startGate(t, cfg)
	conn := grpcClient(t, g)
	start := time.Now()
	c := create(conn, 10*time.Second, "alice", "k1", "order")
	if status.Code(c.err) != codes.Unavailable || !strings.Contains(c.err.Error(), "enable server.h2c") {
		t.Fatalf("gRPC without TLS, server.h2c off: %v; want UNAVAILABLE saying to enable server.h2c", c.err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("failed after %v, want at once", took)
	}
	t.Logf("grpc-go says: %v", c.err)
	if n := b.Executions("k1"); n != 0 {
		t.Fatalf("the backend ran %d times", n)
	}
}

// TestGRPCReplayOverH2C: an h2c client on the plain listener, an h2c
// upstream; the retry is answered from the record with the same message
// and trailers, and the handler ran once. (Before: idemgate spoke
// HTTP/1.1 to the h2c upstream and answered upstream-failed.)
func TestGRPCReplayOverH2C(t *testing.T) {
	b := startGRPCBackend(t, grpcorderstest.Echo)
	g := startGate(t, grpcGateConfig(b.addr))
	conn := grpcClient(t, g)
	first := create(conn, 10*time.Second, "alice", "k1", "order")
	if first.err != nil || first.value != "order#1" {
		t.Fatalf("first: %q %v", first.value, first.err)
	}
	retry := create(conn, 10*time.Second, "alice", "k1", "order")
	if retry.err != nil || retry.value != "order#1" || strings.Join(retry.trailer.Get("x-order-id"), ",") != "ord-k1-1" {
		t.Fatalf("retry: %q %v trailers %v", retry.value, retry.err, retry.trailer)
	}
	if got := strings.Join(retry.header.Get("idempotent-replayed"), ","); got != "true" {
		t.Fatalf("retry header idempotent-replayed %q", got)
	}
	if n := b.Executions("k1"); n != 1 {
		t.Fatalf("executions %d, want 1", n)
	}
}

// TestGRPCProblemsAreStatuses: key reuse, a missing key and a missing
// owner reach a grpc-go client as FAILED_PRECONDITION, INVALID_ARGUMENT
// and UNAUTHENTICATED with the problem slug as ErrorInfo reason, the
// missing key's message naming the metadata entry a gRPC caller sets.
// (Before: UNKNOWN, with the problem JSON in the message, and INTERNAL.)
func TestGRPCProblemsAreStatuses(t *testing.T) {
	b := startGRPCBackend(t, grpcorderstest.Echo)
	g := startGate(t, grpcGateConfig(b.addr))
	conn := grpcClient(t, g)
	if c := create(conn, 10*time.Second, "alice", "k1", "order"); c.err != nil {
		t.Fatalf("first: %v", c.err)
	}
	wantStatus(t, "same key, other message", create(conn, 10*time.Second, "alice", "k1", "other"), codes.FailedPrecondition, "key-reused")
	noKey := create(conn, 10*time.Second, "alice", "", "order")
	wantStatus(t, "no key", noKey, codes.InvalidArgument, "missing-key")
	// A gRPC caller sets metadata, not header fields on POST requests.
	if msg := status.Convert(noKey.err).Message(); !strings.Contains(msg, "the idempotency-key metadata entry") {
		t.Fatalf("no key: message %q does not name the idempotency-key metadata entry", msg)
	}
	wantStatus(t, "no owner", create(conn, 10*time.Second, "", "k2", "order"), codes.Unauthenticated, "missing-owner")
	if n := b.Executions("k1"); n != 1 {
		t.Fatalf("executions %d, want 1", n)
	}
	if c := create(conn, 10*time.Second, "alice", "k1", "order"); c.err != nil {
		t.Fatalf("replay: %v", c.err)
	}
	// Every gRPC answer is HTTP 200: the access line carries the
	// grpc-status sent, in the header (idemgate's own answers) or the
	// trailers (forwarded, replayed).
	for outcome, want := range map[string]string{"forwarded": "0", "replayed": "0", "mismatch": "9", "missing_key": "3", "missing_owner": "16"} {
		line := `"outcome":"` + outcome + `","status":200,`
		eventually(t, 5*time.Second, "the access line of "+outcome, func() bool { return strings.Contains(g.Logs(), line) })
		for _, l := range strings.Split(g.Logs(), "\n") {
			if strings.Contains(l, line) && !strings.Contains(l, `"grpc_status":"`+want+`"`) {
				t.Errorf("access line of %s without grpc_status %s: %s", outcome, want, l)
			}
		}
	}
}

// TestGRPCUnavailableIsNotStored: a handler's UNAVAILABLE (HTTP 200,
// grpc-status 14) is passed on and the key released, so the retry reaches
// the server and gets its OK; both by hand and by grpc-go's retry policy.
// (Before: the UNAVAILABLE was stored and replayed for the retention.)
func TestGRPCUnavailableIsNotStored(t *testing.T) {
	flaky := func(ctx context.Context, key string, n int, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if n == 1 {
			return nil, status.Error(codes.Unavailable, "database failover")
		}
		return grpcorderstest.Echo(ctx, key, n, in)
	}
	b := startGRPCBackend(t, flaky)
	g := startGate(t, grpcGateConfig(b.addr))

	t.Run("by hand", func(t *testing.T) {
		conn := grpcClient(t, g)
		wantStatus(t, "first", create(conn, 10*time.Second, "alice", "hand", "order"), codes.Unavailable, "")
		if c := create(conn, 10*time.Second, "alice", "hand", "order"); c.err != nil || c.value != "order#2" {
			t.Fatalf("retry: %q %v, want the second execution's OK", c.value, c.err)
		}
		if c := create(conn, 10*time.Second, "alice", "hand", "order"); c.err != nil || c.value != "order#2" {
			t.Fatalf("third: %q %v, want the stored OK", c.value, c.err)
		}
		if n := b.Executions("hand"); n != 2 {
			t.Fatalf("executions %d, want 2", n)
		}
	})
	t.Run("retry policy", func(t *testing.T) {
		conn := grpcClient(t, g, grpc.WithDefaultServiceConfig(`{"methodConfig":[{"name":[{"service":"orders.v1.Orders"}],
			"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.05s","maxBackoff":"0.2s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`))
		if c := create(conn, 10*time.Second, "alice", "policy", "order"); c.err != nil || c.value != "order#2" {
			t.Fatalf("call with a retry policy: %q %v, want the second attempt's OK", c.value, c.err)
		}
		if n := b.Executions("policy"); n != 2 {
			t.Fatalf("executions %d, want 2", n)
		}
	})
}

// TestGRPCUpstreamTimeout: a handler slower than upstream.timeout
// reaches the caller as DEADLINE_EXCEEDED (upstream-timeout), which retry
// policies do not resend, and a retry after it, while the claim is held
// and once its lease ended, gets FAILED_PRECONDITION outcome-unknown, never
// a second execution. (Before: UNAVAILABLE, then UNKNOWN.)
func TestGRPCUpstreamTimeout(t *testing.T) {
	slow := func(ctx context.Context, key string, n int, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		<-ctx.Done() // the grpc-timeout idemgate sent: upstream.timeout
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	b := startGRPCBackend(t, slow)
	g := startGateWith(t, func() gateConfig { c := grpcGateConfig(b.addr, "lease: 1s"); c.UpTimeout = "1s"; return c }(),
		func(doc string) string { return strings.Replace(doc, "wait_timeout: 10s", "wait_timeout: 1s", 1) })
	conn := grpcClient(t, g)
	wantStatus(t, "first", create(conn, 10*time.Second, "alice", "t1", "order"), codes.DeadlineExceeded, "upstream-timeout")
	wantStatus(t, "retry", create(conn, 10*time.Second, "alice", "t1", "order"), codes.FailedPrecondition, "outcome-unknown")
	if n := b.Executions("t1"); n != 1 {
		t.Fatalf("executions %d, want 1", n)
	}
}

// TestGRPCClientDeadlineIsNotForwarded: a client whose deadline is
// shorter than the handler gives up, but the detached upstream call runs
// under upstream.timeout, not the client's grpc-timeout, so its OK is
// stored and a retry with a longer deadline gets it. (Before: the
// handler's DEADLINE_EXCEEDED was stored and replayed.)
func TestGRPCClientDeadlineIsNotForwarded(t *testing.T) {
	var mu sync.Mutex
	var budgets []time.Duration
	handlerDelay := 300 * time.Millisecond
	b := startGRPCBackend(t, func(ctx context.Context, key string, n int, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		dl, _ := ctx.Deadline()
		mu.Lock()
		budgets = append(budgets, time.Until(dl))
		mu.Unlock()
		select {
		case <-time.After(handlerDelay):
			return grpcorderstest.Echo(ctx, key, n, in)
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	})
	g := startGate(t, grpcGateConfig(b.addr))
	conn := grpcClient(t, g)
	wantStatus(t, "impatient client", create(conn, 100*time.Millisecond, "alice", "d1", "order"), codes.DeadlineExceeded, "")
	// Sent while the first call may still run: it waits for it
	// (concurrent: wait) and gets its replay.
	if c := create(conn, 10*time.Second, "alice", "d1", "order"); c.err != nil || c.value != "order#1" {
		t.Fatalf("retry: %q %v, want the first execution's OK", c.value, c.err)
	}
	if n := b.Executions("d1"); n != 1 {
		t.Fatalf("executions %d, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if budgets[0] < 20*time.Second {
		t.Fatalf("handler's deadline %v away, want about upstream.timeout (30s), not the client's 100ms", budgets[0])
	}
}

// TestGRPCProtocolMismatch: an h2c:// upstream that speaks HTTP/1.1
// only processed nothing, so the key is released and the call gets
// UNAVAILABLE upstream-unreachable, again on the retry (not in progress).
// (Before: with an http:// URL to an h2c server, upstream-failed and the
// key held for the lease.)
func TestGRPCProtocolMismatch(t *testing.T) {
	g := startGate(t, grpcGateConfig(h1only.Start(t)))
	conn := grpcClient(t, g)
	for i := range 2 {
		wantStatus(t, fmt.Sprintf("attempt %d", i+1), create(conn, 10*time.Second, "alice", "m1", "order"), codes.Unavailable, "upstream-unreachable")
	}
}

// TestGRPCConcurrentDuplicates: 50 calls with one key at once: one
// execution, and every caller gets its OK with the same message.
func TestGRPCConcurrentDuplicates(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{}, 50)
	b := startGRPCBackend(t, func(ctx context.Context, key string, n int, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		entered <- struct{}{}
		<-release
		return grpcorderstest.Echo(ctx, key, n, in)
	})
	g := startGate(t, grpcGateConfig(b.addr))
	conn := grpcClient(t, g)
	const n = 50
	results := make(chan grpcCall, n)
	for range n {
		go func() { results <- create(conn, 20*time.Second, "alice", "dup", "order") }()
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no call reached the backend")
	}
	close(release)
	for range n {
		c := <-results
		if c.err != nil || c.value != "order#1" {
			t.Errorf("call: %q %v", c.value, c.err)
		}
	}
	if got := b.Executions("dup"); got != 1 {
		t.Fatalf("executions %d, want 1", got)
	}
}

// TestGRPCReplayAcrossInstances: two idemgate instances on one Valkey;
// a call on one is replayed by the other with the same message and
// trailers.
func TestGRPCReplayAcrossInstances(t *testing.T) {
	v := valkeytest.Start(t)
	b := startGRPCBackend(t, grpcorderstest.Echo)
	c := grpcGateConfig(b.addr)
	c.ValkeyAddrs = []string{v.Addr()}
	a, other := startGate(t, c), startGate(t, c)
	first := create(grpcClient(t, a), 10*time.Second, "alice", "x1", "order")
	if first.err != nil {
		t.Fatalf("first on A: %v", first.err)
	}
	retry := create(grpcClient(t, other), 10*time.Second, "alice", "x1", "order")
	if retry.err != nil || retry.value != first.value || strings.Join(retry.trailer.Get("x-order-id"), ",") != "ord-x1-1" {
		t.Fatalf("retry on B: %q %v trailers %v, want %q", retry.value, retry.err, retry.trailer, first.value)
	}
	if n := b.Executions("x1"); n != 1 {
		t.Fatalf("executions %d, want 1", n)
	}
}

// writeTagDescriptors writes a FileDescriptorSet with
// google/protobuf/struct.proto and orders.v1.Orders/Tag(Struct) returns
// (Struct), as protoc --include_imports --descriptor_set_out would.
func writeTagDescriptors(t *testing.T) string {
	t.Helper()
	orders := &descriptorpb.FileDescriptorProto{
		Name: proto.String("orders_tag.proto"), Package: proto.String("orders.v1"), Syntax: proto.String("proto3"),
		Dependency: []string{"google/protobuf/struct.proto"},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Orders"),
			Method: []*descriptorpb.MethodDescriptorProto{{Name: proto.String("Tag"),
				InputType: proto.String(".google.protobuf.Struct"), OutputType: proto.String(".google.protobuf.Struct")}},
		}},
	}
	return protodesctest.Write(t, "orders.binpb", protodesc.ToFileDescriptorProto(structpb.File_google_protobuf_struct_proto), orders)
}

// TestGRPCMapFieldResends: a message with a map field (a Struct of 12
// fields) resent ten times with one key. grpc-go marshals map entries in
// Go's random map order, so the bytes differ between resends; with
// fingerprint.body: protobuf every resend is the same request: one
// execution, ten OKs. (Before, body: raw: 7 of 10 resends got
// key-reused.)
func TestGRPCMapFieldResends(t *testing.T) {
	b := startGRPCBackend(t, grpcorderstest.Echo)
	c := grpcGateConfig(b.addr)
	c.Routes += "  - name: tag\n    match: \"grpc orders.v1.Orders/Tag\"\n    required: true\n" +
		"    fingerprint: {body: protobuf, descriptors: \"" + writeTagDescriptors(t) + "\"}\n"
	g := startGate(t, c)
	conn := grpcClient(t, g)
	fields := map[string]any{}
	for i := range 12 {
		fields[fmt.Sprintf("sku-%02d", i)] = float64(i)
	}
	msg, err := structpb.NewStruct(fields)
	if err != nil {
		t.Fatal(err)
	}
	distinct := map[string]bool{}
	for i := range 10 {
		if enc, err := proto.Marshal(msg); err == nil {
			distinct[string(enc)] = true
		}
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice", "idempotency-key", "map-1"), 10*time.Second)
		out := new(structpb.Struct)
		err := conn.Invoke(ctx, "/orders.v1.Orders/Tag", msg, out)
		cancel()
		if err != nil || len(out.GetFields()) != 12 {
			t.Fatalf("resend %d: %v (%d fields)", i+1, err, len(out.GetFields()))
		}
	}
	if n := b.Executions("map-1"); n != 1 {
		t.Fatalf("executions %d, want 1", n)
	}
	t.Logf("%d distinct encodings of the message among 10 marshals", len(distinct))

	// A body that is not a message of the method's input type cannot be
	// fingerprinted canonically: INVALID_ARGUMENT, nothing claimed or run.
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice", "idempotency-key", "map-garbage"), 10*time.Second)
	defer cancel()
	var out []byte
	err = conn.Invoke(ctx, "/orders.v1.Orders/Tag", []byte{0x0a, 0xff}, &out, grpc.ForceCodec(rawCodec{}))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("undecodable message: %v, want InvalidArgument", err)
	}
	if n := b.Executions("map-garbage"); n != 0 {
		t.Fatalf("undecodable message ran %d times, want 0", n)
	}
}

// rawCodec sends and receives message bytes as they are, for requests no
// message type describes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *(v.(*[]byte)) = data; return nil }
func (rawCodec) Name() string                       { return "proto" }
