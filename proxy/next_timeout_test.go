package proxy_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
)

// TestInProcessDeadlineFailureKeepsTheClaim: in process the engine's own
// deadline (upstream.timeout) reaches the handler as its context's end,
// cutting it short at a point nobody knows; a handler that then answers
// 500 (context deadline exceeded) may have acted before. The proxy in
// front of the same handler would have answered 504 at the deadline and
// kept the claim; the engine in process does the same instead of
// releasing the key for a retry that runs the handler again.
func TestInProcessDeadlineFailureKeepsTheClaim(t *testing.T) {
	var runs atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		// Acted (charged the card), then the next step ran out of time.
		<-r.Context().Done()
		http.Error(w, r.Context().Err().Error(), http.StatusInternalServerError)
	})
	h := newHarness(t, created, func(o *proxy.Options, d *policy.Route, _ *[]policy.Route) {
		o.Next = handler
		o.Timeout = 300 * time.Millisecond
		d.Lease = 5 * time.Second
		d.Concurrent = policy.ConcurrentConflict
	})
	r := h.do("POST", "/v1/orders", "alice", "k", "{}")
	if r.status != 504 {
		t.Fatalf("first: %d %s, want 504 upstream-timeout", r.status, r.body)
	}
	r = h.do("POST", "/v1/orders", "alice", "k", "{}")
	if r.status != 409 {
		t.Fatalf("retry: %d %s, want 409 while the claim runs out", r.status, r.body)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// TestInProcessDeadlineGRPCFailureKeepsTheClaim: the same for a gRPC
// handler whose context ended under it and that answers a transient code
// (INTERNAL, from the error its store call returned): outcome unknown,
// the claim kept, the handler run once.
func TestInProcessDeadlineGRPCFailureKeepsTheClaim(t *testing.T) {
	var runs atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		<-r.Context().Done()
		grpcAnswer("13", false)(w, r)
	})
	h := newHarness(t, created, func(o *proxy.Options, d *policy.Route, _ *[]policy.Route) {
		o.Next = handler
		o.Timeout = 300 * time.Millisecond
		d.Lease = 5 * time.Second
		d.Concurrent = policy.ConcurrentConflict
	})
	if r := doGRPC(t, h, "/orders.v1.Orders/Create", "alice", "k", "x"); r.header.Get("Grpc-Status") != "13" {
		t.Fatalf("first: %d %v %s, want the handler's INTERNAL passed on", r.status, r.header, r.body)
	}
	if r := doGRPC(t, h, "/orders.v1.Orders/Create", "alice", "k", "x"); r.header.Get("Grpc-Status") == "13" || r.header.Get("Grpc-Status") == "0" {
		t.Fatalf("retry: %d %v %s, want refused while the claim runs out", r.status, r.header, r.body)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}
