package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/internal/grpcorderstest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// BenchmarkGRPCUnary measures one unary call (sequential, one client
// connection) to a grpc-go server directly, and through idemgate (a
// binary built without -race, memory store, h2c both ways) with a fresh
// key per call, with the same key (replay) and without a key
// (passthrough), so the ratios come from
// one run on one machine:
//
//	go test -run '^$' -bench BenchmarkGRPCUnary -benchtime 3000x ./e2e
func BenchmarkGRPCUnary(b *testing.B) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "idemgate")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/idemgate").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	be := startGRPCBackend(b, grpcorderstest.Echo).addr
	listen := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(b))
	admin := fmt.Sprintf("127.0.0.1:%d", valkeytest.FreePort(b))
	cfg := grpcGateConfig(be)
	// No access line per call: the figures are the proxy's, not its log's.
	doc := strings.Replace(cfg.yaml(listen, admin), "  level: info\n", "  level: info\n  access: false\n", 1)
	// A call without a key passes through: the proxy's own cost.
	doc = strings.Replace(doc, "    required: true\n", "    required: false\n", 1)
	path := filepath.Join(dir, "idemgate.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", path)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if !gatetest.Until(20*time.Second, gatetest.Serves("http://"+admin+"/healthz", 200)) {
		b.Fatal("idemgate did not become healthy")
	}
	dial := func(addr string) *grpc.ClientConn {
		conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	call := func(conn *grpc.ClientConn, key string) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice")
		if key != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", key)
		}
		if err := conn.Invoke(ctx, createMethod, wrapperspb.String("order"), new(wrapperspb.StringValue)); err != nil {
			b.Fatal(err)
		}
	}
	direct, gate := dial(be), dial(listen)
	b.Run("direct", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			call(direct, "d"+strconv.Itoa(i))
		}
	})
	b.Run("passthrough", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			call(gate, "")
		}
	})
	b.Run("fresh", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			call(gate, fmt.Sprintf("f%d-%d", b.N, i))
		}
	})
	call(gate, "replayed")
	b.Run("replay", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			call(gate, "replayed")
		}
	})
}
