package proxy_test

import (
	"net/url"
	"testing"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
)

// TestPerRouteUpstream: with two backends, a route with its own upstream
// sends its enforced and passthrough requests there, every other request
// goes to the global upstream, and the same key on both services is two
// operations, since the routes' records live in different scopes.
func TestPerRouteUpstream(t *testing.T) {
	invoices := newUpstream(t, created)
	target, _ := url.Parse(invoices.URL)
	h := newHarness(t, created, func(o *proxy.Options, _ *policy.Route, routes *[]policy.Route) {
		r := baseRoute()
		r.Name, r.Match, r.Upstream = "invoices", "/v1/invoices/", target
		*routes = append(*routes, r)
	})
	if r := h.do("POST", "/v1/invoices/", "alice", "k1", "{}"); r.status != 201 {
		t.Fatalf("invoices: %d %s", r.status, r.body)
	}
	if r := h.do("POST", "/v1/invoices/", "alice", "k1", "{}"); r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("invoices retry not replayed: %d", r.status)
	}
	if r := h.do("POST", "/v1/orders", "alice", "k1", "{}"); r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("orders with the same key: %d replayed=%q", r.status, r.header.Get("Idempotent-Replayed"))
	}
	h.do("GET", "/v1/invoices/7", "alice", "", "")
	h.do("GET", "/v1/orders/7", "alice", "", "")
	for _, c := range []struct {
		up   *upstream
		path string
		want int
	}{
		{invoices, "/v1/invoices/", 1}, {invoices, "/v1/invoices/7", 1}, {invoices, "/v1/orders", 0},
		{h.up, "/v1/orders", 1}, {h.up, "/v1/orders/7", 1}, {h.up, "/v1/invoices/", 0}, {h.up, "/v1/invoices/7", 0},
	} {
		if got := c.up.count(c.path); got != c.want {
			t.Errorf("%s got %d requests for %s, want %d", c.up.URL, got, c.path, c.want)
		}
	}
	invoices.mu.Lock()
	host := invoices.last.Host
	invoices.mu.Unlock()
	if host != target.Host {
		t.Errorf("Host at the route's upstream = %q, want %q", host, target.Host)
	}
}
