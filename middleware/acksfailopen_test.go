package middleware_test

import (
	"net/http"
	"strings"
	"testing"
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
	p := startAcksPair(t, "mw-acksopen:", "    on_store_error: fail_open\n")
	holder, other, orders, replica, post := p.holder, p.other, p.orders, p.replica, p.post
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
	if a := p.until201(other.URL, "made", "the retry once the replica is back"); a.header.Get("Idempotent-Replayed") != "true" || a.body != first.body {
		t.Fatalf("the retry once the replica is back: replayed=%q %s, want the replay of %s", a.header.Get("Idempotent-Replayed"), a.body, first.body)
	}
	if n := orders.runsOf("made"); n != 1 {
		t.Fatalf("handler ran %d times, want once", n)
	}
}
