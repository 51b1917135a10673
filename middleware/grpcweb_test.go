package middleware_test

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestMiddlewareGRPCWeb: in process, as behind the proxy, a gRPC-Web
// call is a gRPC call: the handler's HTTP 200 whose body ends in a
// trailer frame with grpc-status 14 (UNAVAILABLE) releases the key, so
// the retry runs the handler again and its OK is what is replayed; key
// reuse is answered as grpc-status 9 in the headers of an HTTP 200, not
// as problem JSON. (Before: the UNAVAILABLE was stored and replayed.)
func TestMiddlewareGRPCWeb(t *testing.T) {
	v := valkeytest.Start(t)
	var mu sync.Mutex
	runs := map[string]int{}
	frame := func(flag byte, payload string) string {
		n := len(payload)
		return string([]byte{flag, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}) + payload
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		mu.Lock()
		runs[r.Header.Get("Idempotency-Key")]++
		n := runs[r.Header.Get("Idempotency-Key")]
		mu.Unlock()
		status := "grpc-status: 0\r\n"
		if n == 1 {
			status = "grpc-status: 14\r\ngrpc-message: failover\r\n"
		}
		w.Header().Set("Content-Type", "application/grpc-web+proto")
		_, _ = io.WriteString(w, frame(0, "order")+frame(0x80, status))
	})
	cfg := strings.Replace(testConfig(v.Addr(), "grpcweb:"), `match: "POST /v1/orders"`, `match: "grpc orders.v1.Orders/Create"`, 1)
	srv := serve(t, cfg, h)
	call := func(key, msg string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders.v1.Orders/Create", strings.NewReader(frame(0, msg)))
		req.Header.Set("Content-Type", "application/grpc-web+proto")
		req.Header.Set("X-User", "alice")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp
	}
	for i := range 3 {
		resp := call("w1", "a")
		if resp.StatusCode != http.StatusOK || (resp.Header.Get("Idempotent-Replayed") == "true") != (i == 2) {
			t.Fatalf("call %d: %d, replayed %q", i+1, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
		}
	}
	mu.Lock()
	n := runs["w1"]
	mu.Unlock()
	if n != 2 {
		t.Fatalf("the handler ran %d times, want 2 (UNAVAILABLE, then OK, then its replay)", n)
	}
	if resp := call("w1", "b"); resp.StatusCode != http.StatusOK || resp.Header.Get("Grpc-Status") != "9" {
		t.Fatalf("key reused: %d grpc-status %q, want 200 and 9", resp.StatusCode, resp.Header.Get("Grpc-Status"))
	}
}
