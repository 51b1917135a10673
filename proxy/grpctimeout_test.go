package proxy_test

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
)

// TestGRPCTimeoutReplacedUpstream: an enforced gRPC call is detached from
// its client, so the client's grpc-timeout (here 10 ms) is not what the
// upstream gets: it gets what is left of upstream.timeout (the harness's
// 5 s).
func TestGRPCTimeoutReplacedUpstream(t *testing.T) {
	var mu sync.Mutex
	var got []string
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Grpc-Timeout"))
		mu.Unlock()
		grpcAnswer("0", true)(w, r)
	})
	if r := doGRPC(t, h, "/orders.v1.Orders/Create", "alice", "k1", "x", "Grpc-Timeout", "10m"); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || !strings.HasSuffix(got[0], "m") {
		t.Fatalf("upstream grpc-timeout %q", got)
	}
	ms, err := strconv.Atoi(strings.TrimSuffix(got[0], "m"))
	if err != nil || ms < 4000 || ms > 5000 {
		t.Fatalf("upstream grpc-timeout %q, want about 5000m (upstream.timeout), not the client's 10m", got[0])
	}
}

// TestGRPCTimeoutReplacedInProcess: in process (Options.Next) the handler
// is the upstream, and a gRPC handler (grpc-go's ServeHTTP) bounds its
// call by grpc-timeout: it must see what is left of upstream.timeout, not
// the client's deadline, which the engine detached the call from. With
// the client's 10 ms a handler slower than that answered
// DEADLINE_EXCEEDED, an unknown outcome that held the key for its lease.
func TestGRPCTimeoutReplacedInProcess(t *testing.T) {
	var mu sync.Mutex
	var got []string
	handler := func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Grpc-Timeout"))
		mu.Unlock()
		grpcAnswer("0", true)(w, r)
	}
	h := newHarness(t, handler, func(o *proxy.Options, _ *policy.Route, _ *[]policy.Route) {
		o.Next = http.HandlerFunc(handler)
	})
	if r := doGRPC(t, h, "/orders.v1.Orders/Create", "alice", "k1", "x", "Grpc-Timeout", "10m"); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || !strings.HasSuffix(got[0], "m") {
		t.Fatalf("handler grpc-timeout %q", got)
	}
	ms, err := strconv.Atoi(strings.TrimSuffix(got[0], "m"))
	if err != nil || ms < 4000 || ms > 5000 {
		t.Fatalf("handler grpc-timeout %q, want about 5000m (upstream.timeout), not the client's 10m", got[0])
	}
}
