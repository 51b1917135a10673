package middleware_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/store/valkey/valkeytest"
)

// TestWaitersOfAReleasedClaimRunOnceInProcess: the middleware's shape of
// the proxy's TestWaitersOfAReleasedClaimRunOnce, on Valkey. Duplicates
// wait (concurrent: wait) while the first call runs; the handler then
// answers that call with a status the route does not store (503), which
// releases the key. The record the waits end on is not completed, so
// every waiter claims again and exactly one of them runs the handler; the
// others get its replay.
func TestWaitersOfAReleasedClaimRunOnceInProcess(t *testing.T) {
	const n = 8
	vk := valkeytest.Start(t)
	release := make(chan struct{})
	var unblock sync.Once
	var calls atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			<-release
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"order":1}`))
	})
	reg := prometheus.NewRegistry()
	gate := serveWith(t, testConfig(vk.Addr(), "mw-waiters:")+"    concurrent: wait\n", h, reg)
	// Before the server's Close, which waits for the held call.
	t.Cleanup(func() { unblock.Do(func() { close(release) }) })
	send := func() answer {
		a, err := postWith(t, noRetry, context.Background(), gate.URL, "alice", "k-wait", `{"n":1}`)
		if err != nil {
			return answer{status: -1, body: err.Error()}
		}
		return a
	}

	first := make(chan answer, 1)
	go func() { first <- send() }()
	gatetest.Eventually(t, 10*time.Second, "the first call at the handler", func() bool { return calls.Load() == 1 })
	out := make(chan answer, n)
	for range n {
		go func() { out <- send() }()
	}
	waitGauge(t, reg, "idemgate_waiters", n)
	unblock.Do(func() { close(release) })
	if a := <-first; a.status != http.StatusServiceUnavailable {
		t.Fatalf("first = %d %s, want the handler's 503", a.status, a.body)
	}
	fresh, replayed := 0, 0
	for range n {
		switch a := <-out; {
		case a.status == http.StatusCreated && a.header.Get("Idempotent-Replayed") == "true":
			replayed++
		case a.status == http.StatusCreated:
			fresh++
		default:
			t.Errorf("waiter: %d %s", a.status, a.body)
		}
	}
	if fresh != 1 || replayed != n-1 {
		t.Errorf("fresh %d replayed %d, want 1 and %d", fresh, replayed, n-1)
	}
	if c := calls.Load(); c != 2 {
		t.Fatalf("handler ran %d times, want 2 (the released call, then one waiter)", c)
	}
}
