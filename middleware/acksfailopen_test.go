package middleware_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestMiddlewareFailOpenNeverRunsAnUnacknowledgedCompletionAgain: acks
// on, a route with on_store_error: fail_open. The replica stops
// acknowledging while the handler runs, so its completion is on the
// primary but not acknowledged (the holder's client gets the response at
// once: fail_open). A retry through a second instance finds the record
// completed, which the store may not hand out before its acknowledgement.
// The store answered, and the operation ran: the retry must be refused
// (503) until the acknowledgement comes, then replayed, as on a fail_closed
// route, never run again by fail_open's unprotected forward (a completed
// record on a full Valkey, or a damaged one, is never forwarded either).
func TestMiddlewareFailOpenNeverRunsAnUnacknowledgedCompletionAgain(t *testing.T) {
	primary := valkeytest.Start(t)
	replica := valkeytest.StartReplica(t, primary.Addr())
	orders := newOrders()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Trim(r.Header.Get("Idempotency-Key"), `"`) == "made" {
			replica.Pause()
		}
		orders.ServeHTTP(w, r)
	})
	cfg := strings.Replace(testConfig(primary.Addr(), "mw-acksopen:"), "    key_prefix:",
		"    acks:\n      replicas: 1\n      timeout: 300ms\n    key_prefix:", 1)
	cfg += "    on_store_error: fail_open\n"
	holder, other := serve(t, cfg, h), serve(t, cfg, h)
	post := func(url, key string) answer {
		t.Helper()
		a, err := postHost(t, noRetry, context.Background(), url, "orders.example", "alice", key, `{"n":1}`)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	if a := post(holder.URL, "warm"); a.status != http.StatusCreated {
		t.Fatalf("a request with the replica live: %d %s", a.status, a.body)
	}

	first := post(holder.URL, "made")
	if first.status != http.StatusCreated {
		t.Fatalf("the holder's answer on a fail_open route: %d %s, want the handler's 201", first.status, first.body)
	}
	retry := post(other.URL, "made")
	if n := orders.runsOf("made"); n != 1 {
		t.Fatalf("handler ran %d times, want once: a retry of a completed operation, its completion not yet acknowledged, was forwarded unprotected (retry: %d replayed=%q)",
			n, retry.status, retry.header.Get("Idempotent-Replayed"))
	}
	if retry.status != http.StatusServiceUnavailable || !strings.Contains(retry.body, "store-unavailable") {
		t.Errorf("a retry through another instance while the completion is not acknowledged: %d %s, want 503 store-unavailable", retry.status, retry.body)
	}

	replica.Resume()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := post(other.URL, "made")
		if a.status == http.StatusCreated {
			if a.header.Get("Idempotent-Replayed") != "true" || a.body != first.body {
				t.Fatalf("the retry once the replica is back: replayed=%q %s, want the replay of %s", a.header.Get("Idempotent-Replayed"), a.body, first.body)
			}
			break
		}
		if a.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("the retry once the replica is back: %d %s", a.status, a.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := orders.runsOf("made"); n != 1 {
		t.Fatalf("handler ran %d times, want once", n)
	}
}
