package proxy_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
)

// TestUnknownStatusKeepsTheClaim: an answer listed in unknown_statuses (a
// gateway between idemgate and the application that answers 504 at its
// own timeout while the application goes on) is passed on as it came,
// neither stored nor released: a retry is refused, never forwarded, and
// once the lease ends on_abandoned (reject) answers outcome-unknown. A
// status not listed still releases the key.
func TestUnknownStatusKeepsTheClaim(t *testing.T) {
	gateway := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/orders" {
			http.Error(w, "upstream request timeout", http.StatusGatewayTimeout)
			return
		}
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}
	h := newHarness(t, gateway, func(o *proxy.Options, d *policy.Route, _ *[]policy.Route) {
		d.Lease = 300 * time.Millisecond
		d.Concurrent = policy.ConcurrentConflict
		d.UnknownStatuses = []policy.StatusRange{{Min: 504, Max: 504}}
		d.OnAbandoned = policy.AbandonedReject
	})
	r := h.do("POST", "/v1/orders", "alice", "k", "{}")
	if r.status != http.StatusGatewayTimeout || r.body != "upstream request timeout\n" {
		t.Fatalf("first got %d %q, want the upstream's 504 as it came", r.status, r.body)
	}
	if r = h.do("POST", "/v1/orders", "alice", "k", "{}"); r.status != http.StatusConflict {
		t.Fatalf("retry within the lease got %d %s, want 409", r.status, r.body)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r = h.do("POST", "/v1/orders", "alice", "k", "{}")
		if r.status == http.StatusConflict && problemType(t, r) == "outcome-unknown" {
			break
		}
		if r.status != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("retry after the lease got %d %s, want 409 outcome-unknown", r.status, r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := h.up.count("/v1/orders"); n != 1 {
		t.Fatalf("upstream saw %d, want 1", n)
	}

	// 503 is not listed: the key is released and the retry forwarded.
	for range 2 {
		if r := h.do("POST", "/v1/other", "alice", "k2", "{}"); r.status != http.StatusServiceUnavailable {
			t.Fatalf("got %d %s, want the upstream's 503", r.status, r.body)
		}
	}
	if n := h.up.count("/v1/other"); n != 2 {
		t.Fatalf("upstream saw %d for a status not listed, want 2 (released)", n)
	}
}
