package middleware_test

import (
	"context"
	"net/http"
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
	primary := valkeytest.Start(t)
	replica := valkeytest.StartReplica(t, primary.Addr())
	orders := newOrders()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Trim(r.Header.Get("Idempotency-Key"), `"`) == "made" {
			replica.Pause()
		}
		orders.ServeHTTP(w, r)
	})
	cfg := strings.Replace(testConfig(primary.Addr(), "mw-acksreplay:"), "    key_prefix:",
		"    acks:\n      replicas: 1\n      timeout: 300ms\n    key_prefix:", 1)
	cfg += "    on_abandoned: takeover\n"
	holder, other := serve(t, cfg, h), serve(t, cfg, h)
	post := func(url, key string) answer {
		t.Helper()
		a, err := postHost(t, noRetry, context.Background(), url, "orders.example", "alice", key, `{"n":1}`)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	until201 := func(url, key, what string) answer {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			a := post(url, key)
			if a.status == http.StatusCreated {
				return a
			}
			if a.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
				t.Fatalf("%s: %d %s", what, a.status, a.body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
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
