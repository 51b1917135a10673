package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestMiddlewareAcksReplayWaitsForTheCompletionsAcknowledgement: the
// middleware with store.valkey.acks on a real primary and replica. The
// replica stops acknowledging while the handler runs, so the completion
// is not acknowledged; a retry through a second middleware instance is
// refused (503) rather than handed that response, which a failover could
// still lose (and a takeover then run again). Once the replica is back,
// the retry is replayed and the handler ran once.
func TestMiddlewareAcksReplayWaitsForTheCompletionsAcknowledgement(t *testing.T) {
	a := startAcksPair(t, "mw-acksreplay:", "    on_abandoned: takeover\n")
	holder, other, orders, replica, post, until201 := a.holder, a.other, a.orders, a.replica, a.post, a.until201
	until201(holder.URL, "warm", "a request with the replica live")

	first := post(holder.URL, "made")
	t.Logf("the holder's answer, its completion not acknowledged: %d", first.status)
	retry := post(other.URL, "made")
	t.Logf("a retry through another instance meanwhile: %d %s", retry.status, retry.body)
	if retry.status != http.StatusServiceUnavailable || !strings.Contains(retry.body, "store-unavailable") {
		t.Errorf("a retry through another instance while the completion is not acknowledged: %d %s, want 503 store-unavailable", retry.status, retry.body)
	}

	replica.Resume()
	until201(other.URL, "made", "the retry once the replica is back")
	if n := orders.runsOf("made"); n != 1 {
		t.Fatalf("handler ran %d times, want once", n)
	}
}

// acksPair is two middleware instances (holder and other) on one Valkey
// primary with a replica and store.valkey.acks (1 replica, 300ms), around
// one orders handler that pauses the replica when it runs the key "made":
// that key's completion is on the primary and not acknowledged.
type acksPair struct {
	holder, other *httptest.Server
	orders        *orders
	replica       *valkeytest.Server
	// post sends alice's {"n":1} with key to url (Host orders.example).
	post func(url, key string) answer
	// until201 posts until a 201, while the answers are 503, for 10 s.
	until201 func(url, key, what string) answer
}

// startAcksPair starts an acksPair whose configuration is testConfig's
// with the acks, the key prefix prefix and route appended to the route.
func startAcksPair(t *testing.T, prefix, route string) *acksPair {
	t.Helper()
	primary := valkeytest.Start(t)
	a := &acksPair{orders: newOrders(), replica: valkeytest.StartReplica(t, primary.Addr())}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Trim(r.Header.Get("Idempotency-Key"), `"`) == "made" {
			a.replica.Pause()
		}
		a.orders.ServeHTTP(w, r)
	})
	cfg := strings.Replace(testConfig(primary.Addr(), prefix), "    key_prefix:",
		"    acks:\n      replicas: 1\n      timeout: 300ms\n    key_prefix:", 1) + route
	a.holder, a.other = serve(t, cfg, h), serve(t, cfg, h)
	a.post = func(url, key string) answer {
		t.Helper()
		ans, err := postHost(t, noRetry, context.Background(), url, "orders.example", "alice", key, `{"n":1}`)
		if err != nil {
			t.Fatal(err)
		}
		return ans
	}
	a.until201 = func(url, key, what string) answer {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			ans := a.post(url, key)
			if ans.status == http.StatusCreated {
				return ans
			}
			if ans.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
				t.Fatalf("%s: %d %s", what, ans.status, ans.body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return a
}

// TestMiddlewareClaimNotAcknowledgedIsNotForwarded: the middleware's shape
// of the proxy's TestClaimNotAcknowledgedIsNotForwardedOnValkey. The
// replica stops acknowledging before the request comes: its claim stands
// on the primary only, where a failover could lose it and a retry on the
// new primary would run the operation again, so the request is refused
// 503 store-unavailable and the handler does not run. Once the replica is
// back, the retry runs, once.
func TestMiddlewareClaimNotAcknowledgedIsNotForwarded(t *testing.T) {
	a := startAcksPair(t, "mw-acksclaim:", "")
	a.until201(a.holder.URL, "warm", "a request with the replica live")

	a.replica.Pause()
	r := a.post(a.holder.URL, "fresh")
	if n := a.orders.runsOf("fresh"); n != 0 {
		t.Fatalf("handler ran %d times for a claim not acknowledged (answered %d %s)", n, r.status, r.body)
	}
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "store-unavailable") {
		t.Errorf("a claim not acknowledged: %d %s, want 503 store-unavailable", r.status, r.body)
	}

	a.replica.Resume()
	if r := a.until201(a.other.URL, "fresh", "the retry once the replica is back"); r.header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("the retry once the replica is back was a replay of an operation that never ran: %s", r.body)
	}
	if n := a.orders.runsOf("fresh"); n != 1 {
		t.Fatalf("handler ran %d times, want once", n)
	}
}
