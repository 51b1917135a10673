package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/grpcorderstest"
	"github.com/idemgate/idemgate/middleware"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// readmeYAML is the configuration README's "Inside your Go service" shows.
func readmeYAML(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Inside your Go service\n")
	section, _, _ = strings.Cut(section, "\n## ")
	_, yaml, ok2 := strings.Cut(section, "```yaml\n")
	yaml, _, ok3 := strings.Cut(yaml, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal(`README.md: no yaml block in "Inside your Go service"`)
	}
	return []byte(yaml)
}

// TestREADMEGoService runs the service README's "Inside your Go service"
// describes, on its YAML (with the test's Valkey address in
// IDEMGATE_STORE_VALKEY_ADDRS, as README suggests): the HTTP route, and
// the gRPC one with a grpc.Server behind the middleware on an http.Server
// speaking HTTP/2 without TLS (ExampleNew_grpc), called by a real grpc-go
// client.
func TestREADMEGoService(t *testing.T) {
	vk := valkeytest.Start(t)
	cfg, err := config.Parse(readmeYAML(t), []string{"IDEMGATE_STORE_VALKEY_ADDRS=" + vk.Addr()}, config.InProcess())
	if err != nil {
		t.Fatalf("README's YAML: %v", err)
	}
	if cfg.Store.Driver != config.DriverValkey {
		t.Fatalf("README's YAML uses the %s store, want valkey", cfg.Store.Driver)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	idem, err := middleware.New(ctx, middleware.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	orders := grpcorderstest.New(func(_ context.Context, _ string, _ int, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return wrapperspb.String("ord_1 for " + in.GetValue()), nil
	})
	gs := grpc.NewServer()
	orders.Register(gs)
	mux := http.NewServeMux()
	mux.Handle("POST /orders.v1.Orders/", gs)
	h := newOrders()
	mux.Handle("POST /v1/orders", h)
	srv := serveH2C(t, idem(mux))

	t.Run("HTTP", func(t *testing.T) {
		do := func() answer {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/orders", strings.NewReader(`{"item":1}`))
			req.Header.Set("Authorization", "Bearer alice")
			req.Header.Set("Idempotency-Key", `"k-readme"`)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			return answer{status: resp.StatusCode, header: resp.Header}
		}
		first, retry := do(), do()
		if first.status != 201 || retry.status != 201 || retry.header.Get("Idempotent-Replayed") != "true" || h.runsOf("k-readme") != 1 {
			t.Fatalf("first %d, retry %d replayed=%q, handler ran %d times", first.status, retry.status, retry.header.Get("Idempotent-Replayed"), h.runsOf("k-readme"))
		}
	})

	t.Run("gRPC", func(t *testing.T) {
		conn, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(srv.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		call := func(key string) (*wrapperspb.StringValue, metadata.MD, error) {
			ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer alice")
			if key != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "idempotency-key", `"`+key+`"`)
			}
			out := new(wrapperspb.StringValue)
			var header metadata.MD
			err := conn.Invoke(ctx, grpcorderstest.CreateMethod, wrapperspb.String("alice"), out, grpc.Header(&header))
			return out, header, err
		}
		first, h1, err := call("g-readme")
		if err != nil {
			t.Fatalf("first call: %v", err)
		}
		retry, h2, err := call("g-readme")
		if err != nil {
			t.Fatalf("retry: %v", err)
		}
		n := orders.Executions(`"g-readme"`)
		if first.GetValue() != "ord_1 for alice" || retry.GetValue() != first.GetValue() || n != 1 {
			t.Fatalf("first %q, retry %q, handler ran %d times; want one run, replayed", first.GetValue(), retry.GetValue(), n)
		}
		if got := h2.Get("idempotent-replayed"); len(got) != 1 || got[0] != "true" {
			t.Errorf("retry's idempotent-replayed metadata %q", got)
		}
		if d1, d2 := h1.Get("date"), h2.Get("date"); len(d1) != 1 || len(d2) != 1 || d1[0] != d2[0] {
			t.Errorf("date: first answer %q, replay %q; want the first answer's repeated", d1, d2)
		}

		_, _, err = call("")
		st, _ := status.FromError(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "idempotency-key metadata") {
			t.Errorf("call without a key: %v; want INVALID_ARGUMENT naming the idempotency-key metadata entry", err)
		}
	})
}

// serveH2C serves h on a loopback server that speaks HTTP/1.1 and HTTP/2
// without TLS (h2c, as a gRPC client calls), closed at the test's end.
func serveH2C(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &protocols
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}
