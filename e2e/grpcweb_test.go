package e2e

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/grpcwebtest"
)

// grpcWebCall posts a gRPC-Web call of content type ct to the gate's
// orders.v1.Orders/Create as alice with key ("" for none) and a one-frame
// body carrying msg, with the client's grpc-timeout of 1S.
func grpcWebCall(g *Gate, ct, key, msg string) Answer {
	body := grpcwebtest.Frame(0, msg)
	if strings.HasPrefix(ct, "application/grpc-web-text") {
		body = base64.StdEncoding.EncodeToString([]byte(body))
	}
	h := http.Header{"Content-Type": {ct}, "X-User": {"alice"}, "Grpc-Timeout": {"1S"}, "X-Grpc-Web": {"1"}}
	if key != "" {
		h.Set("Idempotency-Key", key)
	}
	return postHeaders(10*time.Second, g.URL+createMethod, "", body, h)
}

// TestGRPCWebIsGRPC: gRPC-Web calls (binary and text) on a gRPC route
// are gRPC calls. An upstream's HTTP 200 with grpc-status 14 (UNAVAILABLE)
// in the body's trailer frame, or in the headers of a trailers-only
// answer, is passed on and the key released, so the retry reaches the
// upstream again, gets its OK, and that OK is replayed; the upstream gets
// idemgate's grpc-timeout, not the client's; and idemgate's own answers
// are gRPC statuses in the headers of an HTTP 200 with the call's content
// type, which a gRPC-Web client reads, never problem JSON. (Before: the
// UNAVAILABLE was stored and replayed, 1S was forwarded, and key reuse
// was a 422 problem+json.)
func TestGRPCWebIsGRPC(t *testing.T) {
	u := startUpstream(t)
	var mu sync.Mutex
	var timeouts []string
	u.Set(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		timeouts = append(timeouts, r.Header.Get("Grpc-Timeout"))
		mu.Unlock()
		key, ct := r.Header.Get("Idempotency-Key"), r.Header.Get("Content-Type")
		first := u.Calls("alice", key) == 1
		w.Header().Set("Content-Type", ct)
		if first && strings.HasPrefix(key, "header-") { // trailers-only
			w.Header().Set("Grpc-Status", "14")
			w.Header().Set("Grpc-Message", "failover")
			return
		}
		status := "Grpc-Status: 0\r\ngrpc-message: \r\n"
		if first {
			status = "grpc-status: 14\r\ngrpc-message: failover\r\n"
		}
		body := grpcwebtest.Frame(0, "order "+key) + grpcwebtest.Frame(0x80, status)
		if strings.HasPrefix(ct, "application/grpc-web-text") {
			body = base64.StdEncoding.EncodeToString([]byte(grpcwebtest.Frame(0, "order "+key))) + base64.StdEncoding.EncodeToString([]byte(grpcwebtest.Frame(0x80, status)))
		}
		_, _ = w.Write([]byte(body))
	}, 0, nil)
	g := startGate(t, gateConfig{Upstream: u.URL, Routes: "  - name: create\n    match: \"grpc orders.v1.Orders/Create\"\n    required: true\n"})

	for _, c := range []struct{ key, ct string }{
		{"frame-1", "application/grpc-web+proto"},
		{"frame-2", "application/grpc-web"},
		{"header-1", "application/grpc-web+proto"},
		{"text-1", "application/grpc-web-text+proto"},
		{"text-header-1", "application/grpc-web-text"},
	} {
		for i := range 3 {
			a := grpcWebCall(g, c.ct, c.key, "order")
			if a.Err != nil || a.Status != http.StatusOK {
				t.Fatalf("%s call %d: %d %v", c.key, i+1, a.Status, a.Err)
			}
			if got := a.replayed(); got != (i == 2) {
				t.Errorf("%s call %d: replayed %v", c.key, i+1, got)
			}
		}
		if n := u.Calls("alice", c.key); n != 2 {
			t.Errorf("%s: the upstream ran %d times, want 2 (UNAVAILABLE, then OK, then its replay)", c.key, n)
		}
	}
	mu.Lock()
	for _, to := range timeouts {
		if ms, err := strconv.Atoi(strings.TrimSuffix(to, "m")); err != nil || ms <= 1000 {
			t.Errorf("the upstream got grpc-timeout %q, want what is left of upstream.timeout (30s)", to)
		}
	}
	mu.Unlock()

	for _, c := range []struct {
		what, ct, key, msg, code string
	}{
		{"no key", "application/grpc-web+proto", "", "order", "3"},
		{"key reused", "application/grpc-web+proto", "frame-1", "other", "9"},
		{"key reused, text", "application/grpc-web-text", "frame-1", "other", "9"},
	} {
		a := grpcWebCall(g, c.ct, c.key, c.msg)
		if a.Err != nil || a.Status != http.StatusOK || a.Header.Get("Grpc-Status") != c.code || a.Header.Get("Content-Type") != c.ct || len(a.Body) != 0 {
			t.Errorf("%s: %d %v grpc-status %q content-type %q body %q, want 200, grpc-status %s, %s, no body",
				c.what, a.Status, a.Err, a.Header.Get("Grpc-Status"), a.Header.Get("Content-Type"), a.Body, c.code, c.ct)
		}
	}
	if n := u.Calls("alice", ""); n != 0 {
		t.Errorf("a call without key reached the upstream %d times", n)
	}
}
