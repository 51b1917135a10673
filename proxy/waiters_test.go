package proxy_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/internal/gatetest"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/policy"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/store"
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
	reg, m := testMetrics(t)
	release, unblock := releaser(t)
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		created(w, r)
	}, func(o *proxy.Options, d *policy.Route, _ *[]policy.Route) {
		o.MaxWaiters, o.Metrics = maxWaiters, m
		d.WaitTimeout = 5 * time.Second
	})
	first := make(chan result, 1)
	go func() { first <- h.do("POST", "/v1/orders", "alice", "k", "{}") }()
	gatetest.Eventually(t, 5*time.Second, "the first request upstream", func() bool { return h.up.count("/v1/orders") == 1 })

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
	gatetest.Eventually(t, 5*time.Second, "the waiters", func() bool { return gauge(t, reg, "idemgate_waiters") == maxWaiters })
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

// claimCounter counts the claims of requests' records that reach the
// store under it.
type claimCounter struct {
	store.Store
	claims atomic.Int64
}

// isOwnerRecord reports whether id is an owner record's
// (policy.OwnerRecord): the wrappers that stall or count request claims
// pass it through, as one claim per scope checks it before the first
// request's.
func isOwnerRecord(id store.Identity) bool { return id.Owner == policy.OwnerRecordOwner }

func (c *claimCounter) Claim(ctx context.Context, p store.ClaimParams) (store.ClaimResult, error) {
	if !isOwnerRecord(p.Identity) {
		c.claims.Add(1)
	}
	return c.Store.Claim(ctx, p)
}

// TestWaitersTakeTheRecordTheWaitEndedOn: n duplicates waiting on a running
// operation in one process are answered from the record their shared wait read
// when it ended, so each costs one claim (the one that found the operation
// running), not a second one after the wake-up: a storm of 10,000 waiters sent
// 10,000 claims at once when its operation completed (docs/performance.md,
// "Flat costs"). The replays are the stored response, and a duplicate whose
// body differs gets 422 from its one claim without waiting.
func TestWaitersTakeTheRecordTheWaitEndedOn(t *testing.T) {
	const n = 20
	reg, m := testMetrics(t)
	release, unblock := releaser(t)
	var counter *claimCounter
	h := newHarness(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		created(w, r)
	}, func(o *proxy.Options, d *policy.Route, _ *[]policy.Route) {
		counter = &claimCounter{Store: o.Store}
		o.Store, o.Metrics = counter, m
		d.WaitTimeout = 10 * time.Second
	})
	first := make(chan result, 1)
	go func() { first <- h.do("POST", "/v1/orders", "alice", "k", `{"n":1}`) }()
	gatetest.Eventually(t, 5*time.Second, "the first request upstream", func() bool { return h.up.count("/v1/orders") == 1 })

	same := make(chan result, n)
	for range n {
		go func() { same <- h.do("POST", "/v1/orders", "alice", "k", `{"n":1}`) }()
	}
	gatetest.Eventually(t, 5*time.Second, "every duplicate waiting", func() bool { return gauge(t, reg, "idemgate_waiters") == n })
	if r := h.do("POST", "/v1/orders", "alice", "k", `{"n":2}`); r.status != http.StatusUnprocessableEntity {
		t.Errorf("duplicate with another body: %d %s, want 422", r.status, r.body)
	}
	unblock()

	r0 := <-first
	if r0.status != http.StatusCreated {
		t.Fatalf("first = %d", r0.status)
	}
	for i := range n {
		r := <-same
		if r.status != http.StatusCreated || r.header.Get(proxy.ReplayedHeader) != "true" || r.body != r0.body {
			t.Errorf("waiter %d: %d replayed=%q %q, want the replay of %q", i, r.status, r.header.Get(proxy.ReplayedHeader), r.body, r0.body)
		}
	}
	if got, want := counter.claims.Load(), int64(1+n+1); got != want {
		t.Errorf("%d claims reached the store, want %d: one per request, none after the wake-up", got, want)
	}
	if got := h.up.count("/v1/orders"); got != 1 {
		t.Fatalf("upstream saw %d, want 1", got)
	}
}

// releaser returns a channel an upstream handler blocks on and the
// function that closes it, once; the test's cleanup closes it too, so a
// failing test never leaves a handler blocked.
func releaser(t *testing.T) (<-chan struct{}, func()) {
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	return release, unblock
}

// testMetrics returns a fresh registry and idemgate's metrics on it.
func testMetrics(t *testing.T) (*prometheus.Registry, *metrics.Metrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	return reg, m
}
