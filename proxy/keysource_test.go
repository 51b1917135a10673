package proxy_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/identity"
	"github.com/idemgate/idemgate/proxy"
)

// TestBodyKey: a route whose key is a JSON body member reads the body
// first; the same event posted concurrently and later reaches the upstream
// once and every delivery gets the first answer; a body without the member
// on a required route is 400 missing-key, one with a bad value 400
// invalid-key, and a body over max_request_bytes 413, none forwarded.
func TestBodyKey(t *testing.T) {
	h := newHarness(t, created, func(_ *proxy.Options, d *policy.Route, _ *[]policy.Route) {
		d.Key = identity.KeySource{From: identity.KeyFromBody, Pointer: "/id"}
		d.Owner, d.AllowGlobalKeys = identity.OwnerSource{Kind: identity.OwnerNone}, true
		d.Required = true
	})
	event := `{"id":"evt_1","type":"payment_intent.succeeded"}`
	var wg sync.WaitGroup
	res := make([]result, 5)
	for i := range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); res[i] = h.do("POST", "/hooks/stripe", "", "", event) }()
	}
	wg.Wait()
	res[4] = h.do("POST", "/hooks/stripe", "", "", event)
	for i, r := range res {
		if r.status != http.StatusCreated || r.body != res[0].body {
			t.Fatalf("delivery %d: %d %q, want 201 %q", i, r.status, r.body, res[0].body)
		}
	}
	if n := h.up.count("/hooks/stripe"); n != 1 {
		t.Fatalf("upstream got %d deliveries, want 1", n)
	}
	for _, c := range []struct {
		body   string
		status int
		kind   string
	}{
		{`{"type":"ping"}`, 400, "missing-key"},
		{`{"id":{"nested":1}}`, 400, "invalid-key"},
		{`not json`, 400, "invalid-key"},
		{`{"id":"evt_2","pad":"` + strings.Repeat("x", 2000) + `"}`, 413, "request-too-large"},
		{`{"id":"evt_1","type":"other"}`, 422, "key-reused"},
	} {
		r := h.do("POST", "/hooks/stripe", "", "", c.body)
		if r.status != c.status || !strings.Contains(r.body, c.kind) {
			t.Errorf("%.40s: %d %s, want %d %s", c.body, r.status, r.body, c.status, c.kind)
		}
	}
	if n := h.up.count("/hooks/stripe"); n != 1 {
		t.Fatalf("upstream got %d deliveries, want 1", n)
	}
}
