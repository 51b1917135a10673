package proxy_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
)

// gauge returns the value of the unlabelled gauge name in reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// TestMaxWaitersRefusesBeyondTheCap: with max_waiters 4, 4+3 concurrent
// duplicates of a running operation: exactly 3 get 409 request-in-progress
// with Retry-After at once, while the operation still runs; the 4 others
// wait (idemgate_waiters shows 4) and get the replay once it completes; the
// upstream runs it once, and every slot is given back (the gauge ends at 0).
func TestMaxWaitersRefusesBeyondTheCap(t *testing.T) {
	const maxWaiters, extra = 4, 3
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // never leave the upstream handler blocked
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		created(w, r)
	}, func(o *proxy.Options, d *policy.Route, _ *[]policy.Route) {
		o.MaxWaiters, o.Metrics = maxWaiters, m
		d.WaitTimeout = 5 * time.Second
	})
	first := make(chan result, 1)
	go func() { first <- h.do("POST", "/v1/orders", "alice", "k", "{}") }()
	waitUntil(t, "the first request upstream", func() bool { return h.up.count("/v1/orders") == 1 })

	results := make(chan result, maxWaiters+extra)
	for range maxWaiters + extra {
		go func() {
			start := time.Now()
			r := h.do("POST", "/v1/orders", "alice", "k", "{}")
			r.header.Set("X-Test-Took", time.Since(start).String())
			results <- r
		}()
	}
	// The refused ones answer while the operation is still running.
	for range extra {
		select {
		case r := <-results:
			if r.status != http.StatusConflict || problemType(t, r) != "request-in-progress" || r.header.Get("Retry-After") == "" {
				t.Fatalf("refused duplicate: %d %v %s, want 409 request-in-progress with Retry-After", r.status, r.header, r.body)
			}
			if took, _ := time.ParseDuration(r.header.Get("X-Test-Took")); took > 2*time.Second {
				t.Errorf("refused duplicate answered after %v, want at once", took)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("fewer than %d duplicates were refused while %d waited", extra, maxWaiters)
		}
	}
	waitUntil(t, "the waiters", func() bool { return gauge(t, reg, "idemgate_waiters") == maxWaiters })
	select {
	case r := <-results:
		t.Fatalf("a %d-th duplicate answered %d before the operation completed, want it waiting", extra+1, r.status)
	case <-time.After(100 * time.Millisecond):
	}
	unblock()
	if r := <-first; r.status != http.StatusCreated {
		t.Fatalf("first = %d", r.status)
	}
	for i := range maxWaiters {
		r := <-results
		if r.status != http.StatusCreated || r.header.Get(proxy.ReplayedHeader) != "true" {
			t.Errorf("waiter %d: %d replayed=%q %s, want the replay", i, r.status, r.header.Get(proxy.ReplayedHeader), r.body)
		}
	}
	if got := h.up.count("/v1/orders"); got != 1 {
		t.Fatalf("upstream saw %d, want 1", got)
	}
	if g := gauge(t, reg, "idemgate_waiters"); g != 0 {
		t.Fatalf("idemgate_waiters = %v after every wait ended, want 0", g)
	}
}

// waitUntil polls cond for up to 5 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
