package proxy_test

import (
	"testing"

	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/policy/fingerprint"
	"github.com/idemgate/idemgate/proxy"
)

// TestFingerprintExclusions: on a route with fingerprint.exclude, a retry
// whose excluded fields changed is answered with the first response; a
// change anywhere else is 422 key-reused.
func TestFingerprintExclusions(t *testing.T) {
	h := newHarness(t, created, func(_ *proxy.Options, d *policy.Route, _ *[]policy.Route) {
		d.Fingerprint = fingerprint.Spec{Headers: []string{"Content-Type"}, Body: fingerprint.BodyJSON,
			Exclude: []string{"/client_ts", "/meta/request_id"}}
	})
	first := h.do("POST", "/v1/orders", "alice", "k1", `{"amount":5,"client_ts":"10:00:00","meta":{"request_id":"r1","app":"ios"}}`)
	if first.status != 201 {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	retry := h.do("POST", "/v1/orders", "alice", "k1", `{"meta":{"app":"ios","request_id":"r2"},"client_ts":"10:00:05","amount":5}`)
	if retry.status != 201 || retry.body != first.body || retry.header.Get(proxy.ReplayedHeader) != "true" {
		t.Fatalf("retry with changed excluded fields: %d %q, want the replay of %q", retry.status, retry.body, first.body)
	}
	for _, body := range []string{
		`{"amount":6,"client_ts":"10:00:00","meta":{"request_id":"r1","app":"ios"}}`,
		`{"amount":5,"client_ts":"10:00:00","meta":{"request_id":"r1","app":"web"}}`,
	} {
		if r := h.do("POST", "/v1/orders", "alice", "k1", body); r.status != 422 {
			t.Fatalf("key reused with %s: %d %s, want 422", body, r.status, r.body)
		}
	}
	if n := h.up.count("/v1/orders"); n != 1 {
		t.Fatalf("upstream got %d requests, want 1", n)
	}
}
