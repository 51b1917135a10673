package middleware_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestSlowHandlerBeyondLeaseRunsOnce: the middleware's shape of the
// binary's TestFaultSlowUpstreamBeyondLease. A handler that takes 2.5 s
// under a 1 s lease keeps its claim through the heartbeat: duplicates
// through a second instance (so no sharing in one process hides a
// takeover) at 1.5 s and 2 s, after the first lease would have ended,
// are refused 409 request-in-progress, never run; once the call ends, the
// retry is replayed, and the handler ran once.
func TestSlowHandlerBeyondLeaseRunsOnce(t *testing.T) {
	vk := valkeytest.Start(t)
	h := newOrders()
	cfg := strings.Replace(testConfig(vk.Addr(), "mw-slow:"), "lease: 3s", "lease: 1s", 1) + "    concurrent: conflict\n"
	holder, other := serve(t, cfg, h), serve(t, cfg, h)
	send := func(url string) answer {
		t.Helper()
		// One Host for both: the host joins the key scope in process.
		a, err := postHost(t, noRetry, context.Background(), url, "orders.example", "alice", "k-slow", `{"sleep":"2500ms"}`)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}

	start := time.Now()
	first := make(chan answer, 1)
	go func() {
		a, _ := postHost(t, noRetry, context.Background(), holder.URL, "orders.example", "alice", "k-slow", `{"sleep":"2500ms"}`)
		first <- a
	}()
	gatetest.Eventually(t, 10*time.Second, "the handler to run the first request", func() bool { return h.runsOf("k-slow") == 1 })
	for _, at := range []time.Duration{1500 * time.Millisecond, 2 * time.Second} {
		time.Sleep(time.Until(start.Add(at)))
		d := send(other.URL)
		if h.runsOf("k-slow") != 1 || d.status != http.StatusConflict || !strings.Contains(d.body, "request-in-progress") {
			t.Fatalf("duplicate at %v while the handler runs: %d %s (handler ran %d times), want 409 request-in-progress: the heartbeat lost the claim",
				at, d.status, d.body, h.runsOf("k-slow"))
		}
	}
	orig := <-first
	if orig.status != http.StatusCreated {
		t.Fatalf("original: %d %s", orig.status, orig.body)
	}
	if a := send(other.URL); a.header.Get("Idempotent-Replayed") != "true" || a.body != orig.body {
		t.Fatalf("retry after the call: %d replayed=%q %s, want the replay of %s", a.status, a.header.Get("Idempotent-Replayed"), a.body, orig.body)
	}
	if n := h.runsOf("k-slow"); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}
