package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// postHost is post with another Host header, as a client of a virtual host
// sends it.
func postHost(t *testing.T, url, host, owner, key, body string) Answer {
	t.Helper()
	a := postHeaders(20*time.Second, url, host, body, http.Header{"X-User": {owner}, "Idempotency-Key": {key}})
	if a.Err != nil {
		t.Fatalf("POST %s (Host %s): %v", url, host, a.Err)
	}
	return a
}

// TestV1LookupIgnoresCurrentRecords: the layout 1 lookup (store.v1_lookup,
// on by default) reads (owner, route name, key), and a route's name is also
// a legal scope. Route payments-eu keeps its records in scope "payments";
// a request governed by route "payments" (scope default) must not take
// that record for a layout 1 record of its own: before the fix alice's
// payment on another host was answered with upstream B's stored response
// and upstream A never ran it. docs/protocol.md, "Layout versions".
func TestV1LookupIgnoresCurrentRecords(t *testing.T) {
	v := valkeytest.Start(t)
	upA, upB := startUpstream(t), startUpstream(t)
	routes := "  - name: payments\n    match: \"POST /v1/pay\"\n" +
		"  - name: payments-eu\n    match: \"POST eu.example.com/v1/pay\"\n    upstream: \"" + upB.URL + "\"\n    scope: payments\n"
	g := startGate(t, gateConfig{Upstream: upA.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: adminToken, Routes: routes})

	eu := postHost(t, g.URL+"/v1/pay", "eu.example.com", "alice", "k", `{"amount":5}`)
	if eu.Status != 201 || eu.replayed() || upB.Calls("alice", "k") != 1 {
		t.Fatalf("payment on eu.example.com: %v (upstream B ran it %d times), want 201 from B", eu, upB.Calls("alice", "k"))
	}
	global := postHost(t, g.URL+"/v1/pay", "pay.example.com", "alice", "k", `{"amount":5}`)
	if global.Status != 201 || global.replayed() {
		t.Fatalf("payment on another host with the same key: %v, want it forwarded to upstream A, not B's response replayed", global)
	}
	if n := upA.Calls("alice", "k"); n != 1 {
		t.Fatalf("upstream A ran the payment %d times, want 1", n)
	}
	// Each route's retry replays its own response, and B ran once.
	if a := postHost(t, g.URL+"/v1/pay", "pay.example.com", "alice", "k", `{"amount":5}`); a.Status != 201 || !a.replayed() || string(a.Body) != string(global.Body) {
		t.Errorf("retry on the global route: %v, want the replay of %s", a, global.Body)
	}
	if a := postHost(t, g.URL+"/v1/pay", "eu.example.com", "alice", "k", `{"amount":5}`); a.Status != 201 || !a.replayed() || string(a.Body) != string(eu.Body) {
		t.Errorf("retry on eu.example.com: %v, want the replay of %s", a, eu.Body)
	}
	if upA.Total() != 1 || upB.Total() != 1 {
		t.Errorf("upstream A ran %d, B %d requests; want 1 each", upA.Total(), upB.Total())
	}
}

// TestAdminV1FallbackOnlyLayout1: the admin API looks for a layout 1 record
// under (owner, route name, key) when the record of the request's own
// identity is absent. Route refunds keeps its records in scope "payments";
// asking for route payments' record must not show or purge the refund's:
// before the fix GET showed it and DELETE purged it (204) even with
// v1_lookup: false, and the refund's next retry ran again.
func TestAdminV1FallbackOnlyLayout1(t *testing.T) {
	for _, v1 := range []bool{true, false} {
		name := "v1_lookup on"
		if !v1 {
			name = "v1_lookup off"
		}
		t.Run(name, func(t *testing.T) {
			v := valkeytest.Start(t)
			up := startUpstream(t)
			routes := "  - name: payments\n    match: \"POST /v1/pay\"\n" +
				"  - name: refunds\n    match: \"POST /v1/refunds\"\n    scope: payments\n"
			g := startGateWith(t, gateConfig{Upstream: up.URL, ValkeyAddrs: []string{v.Addr()}, AdminToken: adminToken, Routes: routes},
				func(doc string) string {
					if v1 {
						return doc
					}
					return strings.Replace(doc, "  driver: valkey\n", "  driver: valkey\n  v1_lookup: false\n", 1)
				})
			refund := mustPost(t, g.URL+"/v1/refunds", "alice", "k1", `{"amount":5}`)
			if refund.Status != 201 {
				t.Fatalf("refund: %v", refund)
			}
			if a := adminDo(t, "GET", recordURL(g, "payments", "alice", "k1", ""), adminToken); a.Status != 404 {
				t.Errorf("GET route payments' record k1: %d %s, want 404 (the record is the refund's)", a.Status, a.Body)
			}
			if a := adminDo(t, "DELETE", recordURL(g, "payments", "alice", "k1", ""), adminToken); a.Status != 404 {
				t.Errorf("DELETE route payments' record k1: %d %s, want 404 and the refund's record untouched", a.Status, a.Body)
			}
			if a := adminDo(t, "GET", recordURL(g, "refunds", "alice", "k1", ""), adminToken); a.Status != 200 {
				t.Errorf("GET the refund's own record: %d %s, want 200", a.Status, a.Body)
			}
			if a := mustPost(t, g.URL+"/v1/refunds", "alice", "k1", `{"amount":5}`); a.Status != 201 || !a.replayed() {
				t.Errorf("refund's retry after the purge of another route's key: %v, want a replay", a)
			}
			if n := up.Calls("alice", "k1"); n != 1 {
				t.Errorf("the refund ran %d times, want 1", n)
			}
		})
	}
}
